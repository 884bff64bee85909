//! The scripted model of the trials (testsupport's, over real HTTP) with a
//! responder that reads from the request whose turn it serves and which
//! pass that is: a request ending with a user message is that turn's first
//! pass (it calls the planned async tools); one ending with the pending
//! results of a turn's calls is the pass after them (it says
//! `started <marker>`); one ending with arrived results (`async_status`
//! results) is the continuation of the turn whose calls they are (it says
//! `done <marker>`). The turn's plan is read from its own user message,
//! wherever that stands, so a continuation that runs after a later turn
//! is still told apart from that turn. Every request is counted by turn,
//! phase and `Idempotency-Key`, numbered in arrival order, and noted with
//! what it shows of later turns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::plan::{call_marker, TurnPlan};
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
    /// Its place among all requests of the run (from 0, in arrival order).
    pub seq: u64,
    /// The marker of the turn of the request's last user message.
    pub last_user: Option<String>,
    /// Whether that last user message is answered in the request: it is
    /// the request's own turn's, or an assistant message after it carries
    /// its turn's calls or texts.
    pub last_user_answered: bool,
    /// The request's messages in short (see [`shape`]), for reports.
    pub shape: String,
}

#[derive(Default)]
struct Ledger {
    by_turn: HashMap<String, Vec<ModelCall>>,
    unplanned: usize,
    next_seq: u64,
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
            let messages = messages(body);
            let Some((plan, phase)) = read(messages) else {
                lock(&seen).unplanned += 1;
                return Reply::error(500, "the chaos model saw no turn plan");
            };
            let (user, answered) = last_user(messages, &plan.marker);
            let mut ledger = lock(&seen);
            let seq = ledger.next_seq;
            ledger.next_seq += 1;
            ledger
                .by_turn
                .entry(plan.marker.clone())
                .or_default()
                .push(ModelCall {
                    phase,
                    key,
                    seq,
                    last_user: user,
                    last_user_answered: answered,
                    shape: shape(messages),
                });
            drop(ledger);
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

    /// Requests whose turn could not be told (answered 500).
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

/// The turn a request serves and which pass it is: from how the request
/// ends (a user message, pending results of a turn's calls, or arrived
/// results, traced back to the calls they answer); failing that, from the
/// last user message and what follows it.
fn read(messages: &[Value]) -> Option<(TurnPlan, Phase)> {
    let last = messages.last()?;
    if last["role"] == "user" {
        return Some((TurnPlan::parse(&text_of(last)?)?, Phase::Initial));
    }
    let told = messages
        .iter()
        .rev()
        .take_while(|message| message["role"] == "tool")
        .find_map(|result| {
            let id = result["tool_call_id"].as_str()?;
            match call_marker(id) {
                Some(marker) => Some((marker.to_owned(), Phase::Interim)),
                None => Some((arrival_marker(messages, result)?, Phase::Continuation)),
            }
        });
    match told {
        Some((marker, phase)) => Some((plan_of(messages, &marker)?, phase)),
        None => {
            let text = messages
                .iter()
                .rev()
                .find(|message| message["role"] == "user")
                .and_then(text_of)?;
            Some((TurnPlan::parse(&text)?, phase(messages)))
        }
    }
}

/// The marker of the turn whose call an arrived result (a tool message of
/// an `async_status` call) answers: the call whose pending result named
/// the same status id, or else the call its completed result names.
fn arrival_marker(messages: &[Value], result: &Value) -> Option<String> {
    let content = tool_content(result);
    let status_id = content["statusId"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            result["tool_call_id"]
                .as_str()?
                .strip_prefix("call_")
                .map(str::to_owned)
        })?;
    status_marker(messages, &status_id).or_else(|| {
        content["result"]["call"]
            .as_str()
            .and_then(call_marker)
            .map(str::to_owned)
    })
}

/// The marker of the turn whose call's pending result named `status_id`.
fn status_marker(messages: &[Value], status_id: &str) -> Option<String> {
    messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .find_map(|message| {
            let marker = call_marker(message["tool_call_id"].as_str()?)?;
            (tool_content(message)["statusId"] == status_id).then(|| marker.to_owned())
        })
}

/// A tool message's content as JSON (`Null` when it is not JSON).
fn tool_content(message: &Value) -> Value {
    message["content"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Value::Null)
}

/// The plan of turn `marker`, from its user message in the request.
fn plan_of(messages: &[Value], marker: &str) -> Option<TurnPlan> {
    messages
        .iter()
        .filter(|message| message["role"] == "user")
        .filter_map(text_of)
        .filter_map(|text| TurnPlan::parse(&text))
        .find(|plan| plan.marker == marker)
}

/// The marker of the last user message and whether it is answered in the
/// request of turn `own`.
fn last_user(messages: &[Value], own: &str) -> (Option<String>, bool) {
    let Some(at) = messages
        .iter()
        .rposition(|message| message["role"] == "user")
    else {
        return (None, false);
    };
    let Some(plan) = text_of(&messages[at]).and_then(|text| TurnPlan::parse(&text)) else {
        return (None, false);
    };
    let answered = plan.marker == own
        || messages[at + 1..].iter().any(|message| {
            message["role"] == "assistant"
                && (tool_calls(message).any(|call| plan.owns_call(call_id(call)))
                    || [plan.interim_text(), plan.final_text()].iter().any(|text| {
                        message["content"].as_str().map(str::trim) == Some(text.as_str())
                    }))
        });
    (Some(plan.marker), answered)
}

/// A request's messages in short: `U:<marker>` for a user message,
/// `A:<marker>x<n>` for an assistant message's calls of a turn,
/// `S:<marker>x<n>` for arrived results of a turn's calls, and the
/// assistant's texts quoted; tool results and the system prompt are left
/// out.
pub fn shape(messages: &[Value]) -> String {
    let mut words = Vec::new();
    for message in messages {
        match message["role"].as_str() {
            Some("user") => {
                let marker = text_of(message)
                    .and_then(|text| TurnPlan::parse(&text))
                    .map_or_else(|| "?".to_owned(), |plan| plan.marker);
                words.push(format!("U:{marker}"));
            }
            Some("assistant") => {
                if let Some(text) = message["content"].as_str().filter(|text| !text.is_empty()) {
                    words.push(format!("{text:?}"));
                }
                let mut groups: Vec<(String, usize)> = Vec::new();
                for call in tool_calls(message) {
                    let id = call_id(call);
                    let group = if call["function"]["name"] == ASYNC_STATUS {
                        let marker = id
                            .strip_prefix("call_")
                            .and_then(|status_id| status_marker(messages, status_id));
                        format!("S:{}", marker.as_deref().unwrap_or("?"))
                    } else {
                        format!("A:{}", call_marker(id).unwrap_or("?"))
                    };
                    match groups.last_mut() {
                        Some((last, count)) if *last == group => *count += 1,
                        _ => groups.push((group, 1)),
                    }
                }
                words.extend(
                    groups
                        .into_iter()
                        .map(|(group, count)| format!("{group}x{count}")),
                );
            }
            _ => {}
        }
    }
    words.join(" ")
}

fn tool_calls(message: &Value) -> impl Iterator<Item = &Value> {
    message["tool_calls"].as_array().into_iter().flatten()
}

fn call_id(call: &Value) -> &str {
    call["id"].as_str().unwrap_or_default()
}

/// The text of a message (a string, or text parts).
fn text_of(message: &Value) -> Option<String> {
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
fn phase(messages: &[Value]) -> Phase {
    let after_user = messages
        .iter()
        .rposition(|message| message["role"] == "user")
        .map_or(0, |last| last + 1);
    let after = &messages[after_user..];
    let arrived = after
        .iter()
        .any(|message| tool_calls(message).any(|call| call["function"]["name"] == ASYNC_STATUS));
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

    const FIRST: &str = "chaos turn t1x0 model 0 calls q5,f7";
    const SECOND: &str = "chaos turn t1x1 model 0 calls s9";

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    fn calls(name: &str, ids: &[&str]) -> Value {
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| {
                json!({"id": id, "type": "function",
                             "function": {"name": name, "arguments": "{}"}})
            })
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    }

    fn result(id: &str, content: Value) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": content.to_string()})
    }

    fn said(text: &str) -> Value {
        json!({"role": "assistant", "content": text})
    }

    /// Turn `t1x0`'s first pass: two calls (status ids `s0`, `s1`) and its answer.
    fn first_pass() -> Vec<Value> {
        vec![
            json!({"role": "system", "content": "s"}),
            user(FIRST),
            calls("chaos_quick", &["t1x0c0", "t1x0c1"]),
            result("t1x0c0", json!({"status": "pending", "statusId": "s0"})),
            result("t1x0c1", json!({"status": "pending", "statusId": "s1"})),
            said("started t1x0"),
        ]
    }

    /// Turn `t1x0`'s arrived results.
    fn arrivals() -> Vec<Value> {
        vec![
            calls(ASYNC_STATUS, &["call_s0", "call_s1"]),
            result("call_s0", json!({"statusId": "s0", "status": "completed"})),
            result("call_s1", json!({"statusId": "s1", "status": "failed"})),
        ]
    }

    fn read_marker(messages: &[Value]) -> Option<(String, Phase)> {
        read(messages).map(|(plan, phase)| (plan.marker, phase))
    }

    #[test]
    fn the_pass_follows_how_the_request_ends() {
        let mut messages = first_pass();
        messages.pop();
        let initial = &messages[..2];
        assert_eq!(read_marker(initial), Some(("t1x0".into(), Phase::Initial)));
        assert_eq!(
            read_marker(&messages),
            Some(("t1x0".into(), Phase::Interim))
        );
        let mut continued = first_pass();
        continued.extend(arrivals());
        assert_eq!(
            read_marker(&continued),
            Some(("t1x0".into(), Phase::Continuation))
        );
        assert_eq!(last_user(&continued, "t1x0"), (Some("t1x0".into()), true));
    }

    #[test]
    fn a_continuation_after_a_later_turn_is_the_earlier_turns() {
        let mut messages = first_pass();
        messages.extend([
            user(SECOND),
            calls("chaos_slow", &["t1x1c0"]),
            result("t1x1c0", json!({"status": "pending", "statusId": "s9"})),
            said("started t1x1"),
        ]);
        messages.extend(arrivals());
        assert_eq!(
            read_marker(&messages),
            Some(("t1x0".into(), Phase::Continuation))
        );
        assert_eq!(last_user(&messages, "t1x0"), (Some("t1x1".into()), true));
        assert_eq!(
            shape(&messages),
            "U:t1x0 A:t1x0x2 \"started t1x0\" U:t1x1 A:t1x1x1 \"started t1x1\" S:t1x0x2"
        );
    }

    #[test]
    fn a_continuation_after_an_unanswered_later_user_message_is_told() {
        let mut messages = first_pass();
        messages.push(user(SECOND));
        messages.extend(arrivals());
        assert_eq!(
            read_marker(&messages),
            Some(("t1x0".into(), Phase::Continuation))
        );
        assert_eq!(last_user(&messages, "t1x0"), (Some("t1x1".into()), false));
    }

    #[test]
    fn without_a_telling_end_the_last_user_message_decides() {
        let mut messages = first_pass();
        messages.push(calls(ASYNC_STATUS, &["call_zz"]));
        messages.push(result("call_zz", json!({"statusId": "zz"})));
        assert_eq!(
            read_marker(&messages),
            Some(("t1x0".into(), Phase::Continuation))
        );
        assert_eq!(read_marker(&[user("hello")]), None);
    }

    #[test]
    fn the_plan_is_read_from_text_parts_too() {
        let messages = [json!({"role": "user", "content": [
            {"type": "text", "text": "chaos turn t2x1 model 0 calls q5"}
        ]})];
        assert_eq!(
            read_marker(&messages),
            Some(("t2x1".into(), Phase::Initial))
        );
    }

    #[tokio::test]
    async fn requests_are_answered_and_counted_by_turn_phase_and_key() {
        let model = ChaosModel::start().await.expect("the model starts");
        let client = reqwest::Client::new();
        let url = format!("{}/chat/completions", model.base_url());
        let first = client
            .post(&url)
            .header("Idempotency-Key", "job1.0")
            .json(&json!({"model": MODEL_ID, "messages": &first_pass()[..2]}))
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
                key: Some("job1.0".into()),
                seq: 0,
                last_user: Some("t1x0".into()),
                last_user_answered: true,
                shape: "U:t1x0".into(),
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
