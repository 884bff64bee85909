//! A detached async call on the cluster completes through the callback.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::{account, Cluster};

const JOB: &str = r#"
export default {
  async execute(ctx, input) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    return { finished: input.job };
  },
};
"#;

#[tokio::test]
#[ignore = "needs a kind cluster: make kind-test"]
async fn a_detached_async_call_completes_through_the_callback() {
    let cluster = Cluster::connect().await;
    // The server pod calls the model on this host, through the kind network.
    let model = ScriptedModel::start_on(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).await;
    let model_url = format!("http://{}:{}/v1", cluster.model_host, model.port());
    let model_id = format!("kind-detached-{}", uuid::Uuid::new_v4().simple());
    model.script(
        &model_id,
        vec![
            Reply::tool_call("c1", "job", json!({"job": "in-kind"})),
            Reply::text("The job started."),
            Reply::text("The job finished."),
            Reply::text("The job finished."),
        ],
    );
    let acct = account("async");
    let tool = cluster.upload(&acct, "job", JOB).await;
    let tool_id = tool["toolId"].as_str().unwrap().to_owned();
    let (status, agent) = cluster
        .request(
            reqwest::Method::POST,
            "/agents",
            &acct,
            Some(json!({
                "name": "kind-detached",
                "config": {
                    "model": {"provider": "openai", "modelId": model_id},
                    "provider": {"openai": {"apiKey": "sk-kind-test", "baseUrl": model_url}},
                    "systemPrompt": "You are a test agent.",
                    "tools": { &tool_id: {"async": true} },
                },
            })),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let agent_id = agent["agentId"].as_str().unwrap();

    let (status, accepted) = cluster
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent_id}/async"),
            &acct,
            Some(json!({
                "id": format!("conv-{}", uuid::Uuid::new_v4().simple()),
                "messages": [{
                    "id": uuid::Uuid::new_v4().to_string(),
                    "role": "user",
                    "parts": [{"type": "text", "text": "run the job"}],
                }],
                "trigger": "submit-message",
            })),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let status_id = accepted["statusId"].as_str().unwrap();

    let started = Instant::now();
    let done = loop {
        let (status, body) = cluster
            .request(
                reqwest::Method::GET,
                &format!("/async/{status_id}"),
                &acct,
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        match body["status"].as_str() {
            Some("completed") => break body,
            Some("failed") => panic!("the detached turn failed: {body}"),
            _ => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the detached turn did not complete (model requests: {}): {body}",
            model.request_count(&model_id)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };

    let parts = done["messages"].as_array().unwrap().last().unwrap()["parts"]
        .as_array()
        .unwrap()
        .clone();
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(text.ends_with("The job finished."), "{done}");
    let pending: Vec<&Value> = parts.iter().filter(|p| p["type"] == "tool-job").collect();
    assert_eq!(pending.len(), 1, "{parts:?}");
    assert_eq!(pending[0]["output"]["status"], "pending", "{parts:?}");
    let arrived: Vec<&Value> = parts
        .iter()
        .filter(|p| p["type"] == "tool-async_status")
        .collect();
    assert_eq!(arrived.len(), 1, "{parts:?}");
    assert_eq!(
        arrived[0]["output"]["result"],
        json!({"finished": "in-kind"}),
        "{parts:?}"
    );
    // The continuation told the model the result the runner posted back.
    let last = model
        .requests(&model_id)
        .last()
        .cloned()
        .expect("model requests");
    let told = last["messages"].to_string();
    assert!(told.contains("in-kind"), "{told}");
}
