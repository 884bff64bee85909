//! `ctx.fetch`: an uploaded tool's code has the server make a request with
//! a secret the code never holds. A probe tool looks for the secret's
//! value in its environment, its own process memory and the files it can
//! read, and finds it nowhere, while the same search finds a value it does
//! hold. The server's answers, the ledger and the upstream's echo of the
//! secret are checked too.

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

use super::upstream::{Upstream, TOKEN};
use crate::app::TestApp;
use crate::support::*;

/// Calls `ctx.fetch(input.url)` with the secret named in a header, then
/// searches for each needle (given XOR-masked, compared masked, so the
/// search itself never writes the value it looks for) in `process.env`,
/// every readable region of its own memory (`/proc/self/mem`), and the
/// files under its working directory, `/tmp` and the worker's directory.
const PROBE: &str = r#"
import { readFileSync, readdirSync, statSync, openSync, readSync, closeSync } from 'node:fs';
import { join } from 'node:path';

const matchAt = (buf, i, enc, key) => {
  for (let j = 0; j < enc.length; j++) if ((buf[i + j] ^ key[j]) !== enc[j]) return false;
  return true;
};
const contains = (buf, enc, key) => {
  for (let i = 0; i + enc.length <= buf.length; i++) {
    if ((buf[i] ^ key[0]) === enc[0] && matchAt(buf, i, enc, key)) return true;
  }
  return false;
};
function searchMemory(needles) {
  const found = needles.map(() => false);
  const maps = readFileSync('/proc/self/maps', 'utf8').split('\n');
  const fd = openSync('/proc/self/mem', 'r');
  let regions = 0;
  for (const line of maps) {
    const [range, perms, , , , path] = line.trim().split(/\s+/);
    if (!range || !perms.startsWith('r') || (path && path.startsWith('[v'))) continue;
    const [start, end] = range.split('-').map((hex) => BigInt('0x' + hex));
    let length = Number(end - start);
    if (length > 256 * 1024 * 1024) length = 256 * 1024 * 1024;
    const chunk = Buffer.alloc(Math.min(length, 8 * 1024 * 1024));
    for (let offset = 0; offset < length; offset += chunk.length) {
      let read = 0;
      try { read = readSync(fd, chunk, 0, Math.min(chunk.length, length - offset), start + BigInt(offset)); } catch { break; }
      const view = chunk.subarray(0, read);
      needles.forEach(({ enc, key }, n) => { if (!found[n] && contains(view, enc, key)) found[n] = true; });
    }
    regions++;
  }
  closeSync(fd);
  return { found, regions };
}
function searchFiles(dirs, needles) {
  const found = needles.map(() => false);
  let files = 0;
  const walk = (dir, depth) => {
    let entries = [];
    try { entries = readdirSync(dir); } catch { return; }
    for (const name of entries) {
      const path = join(dir, name);
      let stat;
      try { stat = statSync(path); } catch { continue; }
      if (stat.isDirectory() && depth < 6) walk(path, depth + 1);
      else if (stat.isFile() && stat.size < 16 * 1024 * 1024) {
        let data;
        try { data = readFileSync(path); } catch { continue; }
        files++;
        needles.forEach(({ enc, key }, n) => { if (!found[n] && contains(data, enc, key)) found[n] = true; });
      }
    }
  };
  dirs.forEach((dir) => walk(dir, 0));
  return { found, files };
}
export default { async execute(ctx, input) {
  const answer = await ctx.fetch(input.url, { headers: { authorization: 'Bearer {{secret.API_TOKEN}}' } });
  const body = await answer.json();
  const control = Buffer.from('held-' + input.salt);
  const needles = [input.secret, input.control].map(({ enc, key }) => ({ enc: Buffer.from(enc), key: Buffer.from(key) }));
  const env = Buffer.from(JSON.stringify(process.env));
  const memory = searchMemory(needles);
  const files = searchFiles([process.cwd(), '/tmp', new URL('.', import.meta.url).pathname], needles);
  return {
    status: answer.status, body, held: control.length,
    env: needles.map(({ enc, key }) => contains(env, enc, key)),
    memory: memory.found, regions: memory.regions,
    files: files.found, filesSearched: files.files,
  };
} };
"#;

/// `value` XOR-masked: the encoded bytes and the mask.
fn masked(value: &str) -> Value {
    let key: Vec<u8> = (0..value.len())
        .map(|i| 0x5a ^ (i as u8).wrapping_mul(37) | 1)
        .collect();
    let enc: Vec<u8> = value
        .bytes()
        .zip(&key)
        .map(|(byte, mask)| byte ^ mask)
        .collect();
    json!({"enc": enc, "key": key})
}

#[sqlx::test(migrations = "../../migrations")]
async fn ctx_fetch_uses_a_secret_the_tool_never_holds(pool: PgPool) {
    let app = TestApp::builder(pool.clone()).serve().spawn().await;
    let upstream = Upstream::start(vec![]).await;
    let (status, _) = app
        .request(
            Method::PUT,
            "/accounts/me/secrets/API_TOKEN",
            ACCOUNT_A,
            Some(json!({"value": TOKEN})),
        )
        .await;
    assert_eq!(status, 201);
    let probe = app
        .upload(ACCOUNT_A, "probe", PROBE, json!({"type": "object"}))
        .await;
    let salt = "c0ntr0l-9d1e";
    let input = json!({
        "url": format!("{}/auth", upstream.base()),
        "salt": salt,
        "secret": masked(TOKEN),
        "control": masked(&format!("held-{salt}")),
    });
    let (status, result) = app
        .invoke(
            ACCOUNT_A,
            &probe,
            json!({"input": input, "timeoutMs": 60000}),
        )
        .await;
    assert_eq!(status, 200, "{result}");
    let output = &result["output"];
    assert_eq!(output["status"], 200, "{result}");
    assert_eq!(
        output["body"]["authorized"], true,
        "the server filled the secret in: {result}"
    );
    assert_eq!(
        output["body"]["youSent"], "Bearer [redacted]",
        "an echo of it is replaced: {result}"
    );
    assert!(
        output["regions"].as_u64().unwrap() > 10 && output["filesSearched"].as_u64().unwrap() > 5,
        "{result}"
    );
    assert_eq!(
        output["memory"],
        json!([false, true]),
        "the search finds what the tool holds, not the secret: {result}"
    );
    assert_eq!(output["env"], json!([false, false]), "{result}");
    assert_eq!(output["files"][0], false, "{result}");

    let calls = super::ended_calls(&app, 1).await;
    let ledger: Vec<String> =
        sqlx::query_scalar("SELECT row_to_json(tool_calls)::text FROM tool_calls")
            .fetch_all(&pool)
            .await
            .unwrap();
    for text in ledger
        .iter()
        .chain([&json!(calls).to_string(), &result.to_string()])
    {
        assert!(!text.contains(TOKEN), "the secret leaked: {text}");
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn ctx_fetch_is_held_to_the_tools_egress_and_a_valid_grant(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let upstream = Upstream::start(vec![]).await;
    const FETCHER: &str = "export default { async execute(ctx, input) { try { const r = await ctx.fetch(input.url, { headers: input.headers ?? {} }); return { status: r.status, text: await r.text() }; } catch (err) { return { error: err.message }; } } };";
    let mut body =
        toolserver_testsupport::tools::upload_body("fetcher", FETCHER, json!({"type": "object"}));
    body["egress"] = json!({"allow": ["localhost"]});
    let (status, created) = app
        .request(Method::POST, "/accounts/me/tools", ACCOUNT_A, Some(body))
        .await;
    assert_eq!(status, 201, "{created}");
    let tool = created["toolId"].as_str().unwrap().to_owned();
    let call = |url: String, headers: Value| {
        let app = &app;
        let tool = tool.clone();
        async move {
            let (_, result) = app
                .invoke(
                    ACCOUNT_A,
                    &tool,
                    json!({"input": {"url": url, "headers": headers}}),
                )
                .await;
            result["output"].clone()
        }
    };
    let allowed = call(format!("{}/text", upstream.named_base()), json!({})).await;
    assert_eq!(allowed, json!({"status": 200, "text": "plain words"}));
    let refused = call(format!("{}/text", upstream.base()), json!({})).await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("not in the tool's egress allow list"),
        "{refused}"
    );
    let unset = call(
        format!("{}/text", upstream.named_base()),
        json!({"x-key": "{{secret.NOPE}}"}),
    )
    .await;
    assert!(
        unset["error"].as_str().unwrap().contains("NOPE is not set"),
        "{unset}"
    );
    let input_placeholder = call(
        format!("{}/text", upstream.named_base()),
        json!({"x-key": "{{input.q}}"}),
    )
    .await;
    assert!(
        input_placeholder["error"]
            .as_str()
            .unwrap()
            .contains("only {{secret.NAME}}"),
        "{input_placeholder}"
    );

    for (grant, status) in [(None, 401), (Some("fgt1~acct_a~tool_00~1~00"), 403)] {
        let mut request = app
            .client
            .post(format!("{}/runner/fetch", app.base()))
            .json(&json!({"url": "http://localhost/"}));
        if let Some(grant) = grant {
            request = request.header("x-fetch-grant", grant);
        }
        assert_eq!(request.send().await.unwrap().status().as_u16(), status);
    }
}
