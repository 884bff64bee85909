//! The scripted model of the trials (testsupport's, over real HTTP) with a
//! responder that reads the turn's plan from the request: the first pass
//! calls the planned async tools, the pass after their pending results says
//! `started <marker>`, and the pass that sees the arrived results
//! (`async_status` results) says `done <marker>`. Every request is counted
//! by turn, phase and `Idempotency-Key`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::plan::TurnPlan;
use crate::ChaosError;

/// The model id the agent names.
pub const MODEL_ID: &str = "chaos";

/// The tool the server injects arrived results with.
const ASYNC_STATUS: &str = "async_status";

/// Which pass of a turn a model request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The last message is the user's: the pass that makes the calls.
    Initial,
    /// After the calls' pending results, before any arrived.
    Interim,
    /// Arrived results (`async_status` results) are in the request: a
    /// group's continuation.
    Continuation,
}

/// One request the model received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCall {
    /// Which pass.
    pub phase: Phase,
    /// Its `Idempotency-Key` header, if it had one.
    pub key: Option<String>,
}

#[derive(Default)]
struct Ledger {
    by_turn: HashMap<String, Vec<ModelCall>>,
    unplanned: usize,
}

type SharedLedger = Arc<Mutex<Ledger>>;

fn lock(ledger: &SharedLedger) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running model and what it has seen.
pub struct ChaosModel {
    model: ScriptedModel,
    ledger: SharedLedger,
}

impl ChaosModel {
    /// Serves the model on a free loopback port.
    pub async fn start() -> Result<Self, ChaosError> {
        let model = ScriptedModel::try_start()
            .await
            .map_err(|err| ChaosError::Setup(format!("starting the scripted model: {err}")))?;
        let ledger = SharedLedger::default();
        let seen = ledger.clone();
        model.respond_with(MODEL_ID, move |body, headers| {
            let key = headers
                .get("idempotency-key")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            let Some(plan) = user_text(body).as_deref().and_then(TurnPlan::parse) else {
                lock(&seen).unplanned += 1;
                return Reply::error(500, "the chaos model saw no turn plan");
            };
            let phase = phase(body);
            lock(&seen)
                .by_turn
                .entry(plan.marker.clone())
                .or_default()
                .push(ModelCall { phase, key });
            reply(&plan, phase)
        });
        Ok(Self { model, ledger })
    }

    /// The base URL agents use (`…/v1`).
    pub fn base_url(&self) -> String {
        self.model.base_url()
    }

    /// The requests of the turn named `marker`, in arrival order.
    pub fn calls_of(&self, marker: &str) -> Vec<ModelCall> {
        lock(&self.ledger)
            .by_turn
            .get(marker)
            .cloned()
            .unwrap_or_default()
    }

    /// Requests that carried no turn plan (answered 500).
    pub fn unplanned(&self) -> usize {
        lock(&self.ledger).unplanned
    }
}

/// The answer to `phase` of `plan`.
fn reply(plan: &TurnPlan, phase: Phase) -> Reply {
    let reply = match phase {
        Phase::Initial => {
            let mut calls = plan.calls.iter();
            let Some(first) = calls.next() else {
                return Reply::text(&plan.final_text());
            };
            let arguments =
                |call: &crate::plan::CallPlan| json!({"call": call.id, "delayMs": call.delay_ms});
            calls.fold(
                Reply::tool_call(&first.id, first.kind.tool_name(), arguments(first)),
                |reply, call| reply.and_tool_call(&call.id, call.kind.tool_name(), arguments(call)),
            )
        }
        Phase::Interim => Reply::text(&plan.interim_text()),
        Phase::Continuation => Reply::text(&plan.final_text()),
    };
    reply.delay_first(Duration::from_millis(plan.model_delay_ms))
}

/// The text of the last user message (a string, or text parts).
fn user_text(body: &Value) -> Option<String> {
    let message = messages(body)
        .iter()
        .rev()
        .find(|message| message["role"] == "user")?;
    match &message["content"] {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

fn messages(body: &Value) -> &[Value] {
    body["messages"].as_array().map_or(&[][..], Vec::as_slice)
}

/// The phase of a request, from the messages after the last user message.
fn phase(body: &Value) -> Phase {
    let messages = messages(body);
    let after_user = messages
        .iter()
        .rposition(|message| message["role"] == "user")
        .map_or(0, |last| last + 1);
    let after = &messages[after_user..];
    let arrived = after.iter().any(|message| {
        message["tool_calls"].as_array().is_some_and(|calls| {
            calls
                .iter()
                .any(|call| call["function"]["name"] == ASYNC_STATUS)
        })
    });
    if arrived {
        Phase::Continuation
    } else if after.is_empty() {
        Phase::Initial
    } else {
        Phase::Interim
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(after: Vec<Value>) -> Value {
        let mut messages = vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "chaos turn t1x0 model 0 calls q5,f7"}),
        ];
        messages.extend(after);
        json!({"model": MODEL_ID, "messages": messages})
    }

    fn call(name: &str) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": name, "arguments": "{}"}}
        ]})
    }

    #[test]
    fn the_phase_follows_the_messages_after_the_user() {
        assert_eq!(phase(&request(vec![])), Phase::Initial);
        let pending = vec![
            call("chaos_quick"),
            json!({"role": "tool", "tool_call_id": "x", "content": "{\"status\":\"pending\"}"}),
        ];
        assert_eq!(phase(&request(pending.clone())), Phase::Interim);
        let mut arrived = pending;
        arrived.push(json!({"role": "assistant", "content": "started t1x0"}));
        arrived.push(call(ASYNC_STATUS));
        arrived.push(json!({"role": "tool", "tool_call_id": "x", "content": "{}"}));
        assert_eq!(phase(&request(arrived)), Phase::Continuation);
    }

    #[test]
    fn the_plan_is_read_from_text_parts_too() {
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "chaos turn t2x1 model 0 calls q5"}
        ]}]});
        let plan = user_text(&body).as_deref().and_then(TurnPlan::parse);
        assert_eq!(plan.map(|plan| plan.marker), Some("t2x1".to_owned()));
    }

    #[tokio::test]
    async fn requests_are_answered_and_counted_by_turn_phase_and_key() {
        let model = ChaosModel::start().await.expect("the model starts");
        let client = reqwest::Client::new();
        let url = format!("{}/chat/completions", model.base_url());
        let first = client
            .post(&url)
            .header("Idempotency-Key", "job1.0")
            .json(&request(vec![]))
            .send()
            .await
            .expect("answers");
        let text = first.text().await.expect("a body");
        assert!(
            text.contains("chaos_quick") && text.contains("chaos_fail"),
            "{text}"
        );
        assert_eq!(
            model.calls_of("t1x0"),
            vec![ModelCall {
                phase: Phase::Initial,
                key: Some("job1.0".into())
            }]
        );
        let stray = client
            .post(&url)
            .json(&json!({"model": MODEL_ID, "messages": []}))
            .send()
            .await
            .expect("answers");
        assert_eq!(stray.status(), 500);
        assert_eq!(model.unplanned(), 1);
    }
}
