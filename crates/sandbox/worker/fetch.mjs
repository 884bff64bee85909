// ctx.fetch: a request the server makes for the tool. The tool's code
// names secrets as `{{secret.NAME}}` (and the end user's token of the
// connection it declares as `{{connection.PROVIDER.access_token}}`) in
// header values; the server fills them, makes the request through its own
// public-only client and the tool's egress allow list, and answers with
// what came back (any secret value in it replaced), so the code never
// holds a secret. The call's fetch grant (`x-fetch-grant`) says which
// account, tool and end user it is for.
//
// Same shape as the global fetch: (input, init) -> Promise<Response>; a
// request that got no answer rejects with a TypeError saying why.

import { Buffer } from 'node:buffer';

const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);

/** `ctx.fetch` for a call whose request carried `fetch` ({url, grant}); `signal` ends it with the call. */
export function serverFetch(access, signal) {
  return async function fetchThroughServer(input, init = {}) {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input?.url;
    if (typeof url !== 'string') throw new TypeError('ctx.fetch: the first argument must be a URL');
    const headers = [...new Headers(init.headers ?? {}).entries()];
    let bodyBase64;
    if (init.body !== undefined && init.body !== null) {
      bodyBase64 = Buffer.from(await new Response(init.body).arrayBuffer()).toString('base64');
    }
    const answer = await fetch(access.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-fetch-grant': access.grant },
      body: JSON.stringify({ url, method: init.method ?? 'GET', headers, bodyBase64 }),
      redirect: 'error',
      signal: init.signal ?? signal,
    });
    if (!answer.ok) {
      throw new TypeError(`ctx.fetch: the server refused the request (${answer.status}): ${await answer.text()}`);
    }
    const { response, error } = await answer.json();
    if (error) throw new TypeError(`ctx.fetch: ${error.message}`);
    const body = NULL_BODY_STATUS.has(response.status) ? null : Buffer.from(response.bodyBase64, 'base64');
    return new Response(body, { status: response.status, headers: response.headers });
  };
}
