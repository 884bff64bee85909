//! The verdict on one settled turn: what `GET /async/{id}` said (twice),
//! the stored conversation, and the model requests the turn made.
//!
//! - **lost**: the turn ended `failed` (the scripted model never fails, so
//!   only the server can), its state changed after it was terminal, the
//!   status answer and the stored conversation disagree, the user message is
//!   missing, a planned call has no part or never settled, a launched call's
//!   result was never delivered, or the final answer is missing. When later
//!   turns share the conversation, the stored conversation must extend what
//!   the status answer showed instead of equalling it.
//! - **duplicated**: a pass of the turn ran the model under more than one
//!   distinct `Idempotency-Key` (requests without one count one each; a
//!   repeated key is a retry, which is allowed), or the conversation holds a
//!   call, a delivered result, the user message or the final answer twice.

use std::collections::HashSet;

use serde_json::Value;

use crate::api::Answer;
use crate::model::{ModelCall, Phase};
use crate::plan::{ToolKind, TurnPlan};

/// The tool name arrived results are injected under.
const ASYNC_STATUS: &str = "async_status";

/// What was seen of one turn after it reached a terminal state.
pub struct Observed<'a> {
    /// The first terminal `GET /async/{id}` answer's body.
    pub first: &'a Value,
    /// `GET /async/{id}` again, a moment later (and from the other server).
    pub later: &'a Answer,
    /// `GET /conversations/{id}`.
    pub conversation: &'a Answer,
    /// The model requests of the turn.
    pub model_calls: &'a [ModelCall],
    /// Whether other turns write to the same conversation (so it may have
    /// grown since this turn settled).
    pub shared: bool,
}

/// What is wrong with one turn (empty lists: nothing).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Why the turn counts as lost.
    pub lost: Vec<String>,
    /// Why the turn counts as duplicated.
    pub duplicated: Vec<String>,
    /// Whether the turn ended `failed`.
    pub failed: bool,
    /// Model requests that repeated a key already seen (retries).
    pub retries: usize,
    /// Model requests without an `Idempotency-Key`.
    pub unkeyed: usize,
    /// Planned calls that ended as errors without being launched (allowed:
    /// the model was told; but many of them hide a broken setup).
    pub unlaunched: usize,
    /// The error of the first such call, for the report.
    pub unlaunched_error: Option<String>,
    /// What the tool-call ledger is missing or has wrong of the turn's
    /// launched calls (see [`crate::ledger`]).
    pub unrecorded: Vec<String>,
    /// Attempts of the turn's launched calls on the ledger.
    pub attempts: usize,
}

/// Judges one terminal turn of `plan`.
pub fn judge(plan: &TurnPlan, observed: &Observed<'_>) -> Verdict {
    let mut verdict = Verdict::default();
    let first_status = observed.first["status"].as_str().unwrap_or_default();
    if observed.later.status != 200 {
        verdict.lost.push(format!(
            "GET /async answered {} after the turn was {first_status}",
            observed.later.status
        ));
    } else if observed.later.body["status"] != observed.first["status"] {
        verdict.lost.push(format!(
            "the terminal status changed from {first_status} to {}",
            observed.later.body["status"]
        ));
    } else if observed.later.body["messages"] != observed.first["messages"] {
        verdict
            .lost
            .push("the messages changed after the turn was terminal".to_owned());
    }
    model_passes(observed.model_calls, &mut verdict);
    if first_status == "failed" {
        verdict.failed = true;
        verdict.lost.push(format!(
            "the turn failed: {}",
            observed.first["error"].as_str().unwrap_or("(no error)")
        ));
        return verdict;
    }
    if observed.conversation.status != 200 {
        verdict.lost.push(format!(
            "GET /conversations answered {}",
            observed.conversation.status
        ));
        return verdict;
    }
    let stored = &observed.conversation.body["messages"];
    let agree = if observed.shared {
        extends(stored, &observed.first["messages"])
    } else {
        *stored == observed.first["messages"]
    };
    if !agree {
        verdict
            .lost
            .push("GET /async and the stored conversation disagree".to_owned());
    }
    conversation(
        plan,
        stored.as_array().map_or(&[][..], Vec::as_slice),
        &mut verdict,
    );
    verdict
}

/// Whether the `stored` messages are the `snapshot` ones with more written
/// after them: the same messages, the last one possibly with more parts,
/// then possibly more messages.
fn extends(stored: &Value, snapshot: &Value) -> bool {
    let (Some(stored), Some(snapshot)) = (stored.as_array(), snapshot.as_array()) else {
        return false;
    };
    let Some((last, earlier)) = snapshot.split_last() else {
        return true;
    };
    let (Some(now), true) = (stored.get(earlier.len()), stored.starts_with(earlier)) else {
        return false;
    };
    let parts = |message: &Value| message["parts"].as_array().cloned().unwrap_or_default();
    now["id"] == last["id"] && now["role"] == last["role"] && parts(now).starts_with(&parts(last))
}

/// One pass ran the model once: one distinct key per phase.
fn model_passes(calls: &[ModelCall], verdict: &mut Verdict) {
    for phase in [Phase::Initial, Phase::Interim, Phase::Continuation] {
        let mut keys = HashSet::new();
        let (mut keyed, mut unkeyed) = (0, 0);
        for call in calls.iter().filter(|call| call.phase == phase) {
            match &call.key {
                Some(key) => {
                    keyed += 1;
                    keys.insert(key.as_str());
                }
                None => unkeyed += 1,
            }
        }
        verdict.retries += keyed - keys.len();
        verdict.unkeyed += unkeyed;
        let runs = keys.len() + unkeyed;
        if runs > 1 {
            verdict
                .duplicated
                .push(format!("the {phase:?} pass ran the model {runs} times"));
        }
    }
}

/// A tool part of a stored message.
pub(crate) struct ToolPart<'a> {
    pub(crate) name: &'a str,
    pub(crate) call_id: &'a str,
    state: &'a str,
    pub(crate) input: &'a Value,
    pub(crate) output: &'a Value,
    error: Option<&'a str>,
}

/// The tool parts of `messages`, in order.
pub(crate) fn tool_parts(messages: &[Value]) -> Vec<ToolPart<'_>> {
    parts(messages, None)
        .filter_map(|part| {
            let kind = part["type"].as_str()?;
            let name = match kind.strip_prefix("tool-") {
                Some(name) => name,
                None if kind == "dynamic-tool" => part["toolName"].as_str()?,
                None => return None,
            };
            Some(ToolPart {
                name,
                call_id: part["toolCallId"].as_str()?,
                state: part["state"].as_str().unwrap_or_default(),
                input: &part["input"],
                output: &part["output"],
                error: part["errorText"].as_str(),
            })
        })
        .collect()
}

fn parts<'a>(messages: &'a [Value], role: Option<&'a str>) -> impl Iterator<Item = &'a Value> {
    messages
        .iter()
        .filter(move |message| role.is_none_or(|role| message["role"] == role))
        .filter_map(|message| message["parts"].as_array())
        .flatten()
}

/// How many text parts of `role` messages read exactly `text`.
fn texts(messages: &[Value], role: &str, text: &str) -> usize {
    parts(messages, Some(role))
        .filter(|part| part["type"] == "text" && part["text"].as_str().map(str::trim) == Some(text))
        .count()
}

fn conversation(plan: &TurnPlan, messages: &[Value], verdict: &mut Verdict) {
    match texts(messages, "user", &plan.user_text()) {
        1 => {}
        0 => verdict.lost.push("the user message is missing".to_owned()),
        n => verdict
            .duplicated
            .push(format!("the user message is stored {n} times")),
    }
    let tools = tool_parts(messages);
    let mut launched = 0;
    let mut missing = Vec::new();
    for call in &plan.calls {
        let mine: Vec<&ToolPart<'_>> = tools.iter().filter(|t| t.call_id == call.id).collect();
        let part = match mine.as_slice() {
            [part] => part,
            [] => {
                missing.push(call.id.as_str());
                continue;
            }
            more => {
                verdict
                    .duplicated
                    .push(format!("call {} is stored {} times", call.id, more.len()));
                continue;
            }
        };
        match (part.state, part.output["status"].as_str()) {
            ("output-available", Some("pending")) => {}
            ("output-error" | "output-denied", _) => {
                verdict.unlaunched += 1;
                if verdict.unlaunched_error.is_none() {
                    verdict.unlaunched_error = Some(part.error.unwrap_or("(no error)").to_owned());
                }
                continue;
            }
            ("output-available", _) => continue,
            (state, _) => {
                verdict
                    .lost
                    .push(format!("call {} never settled (state {state})", call.id));
                continue;
            }
        }
        launched += 1;
        let Some(status_id) = part.output["statusId"].as_str() else {
            verdict
                .lost
                .push(format!("call {} is pending without a statusId", call.id));
            continue;
        };
        let arrivals: Vec<&ToolPart<'_>> = tools
            .iter()
            .filter(|t| {
                t.name == ASYNC_STATUS
                    && matches!(t.state, "output-available" | "output-error")
                    && (t.input["statusId"] == status_id || t.output["statusId"] == status_id)
            })
            .collect();
        match arrivals.as_slice() {
            [arrival] => outcome(call.kind, &call.id, arrival.output, verdict),
            [] => verdict
                .lost
                .push(format!("the result of call {} never arrived", call.id)),
            more => verdict.duplicated.push(format!(
                "the result of call {} arrived {} times",
                call.id,
                more.len()
            )),
        }
    }
    if !missing.is_empty() {
        verdict.lost.push(format!(
            "{} of {} calls are missing from the conversation: {}",
            missing.len(),
            plan.calls.len(),
            missing.join(" ")
        ));
    }
    match texts(messages, "assistant", &plan.final_text()) {
        0 if launched > 0 => verdict.lost.push("the final answer is missing".to_owned()),
        0 | 1 => {}
        n => verdict
            .duplicated
            .push(format!("the final answer is stored {n} times")),
    }
    let interim = texts(messages, "assistant", &plan.interim_text());
    if interim > 1 {
        verdict
            .duplicated
            .push(format!("the first pass's answer is stored {interim} times"));
    }
}

/// A delivered result must be the call's own: a failing tool never
/// completes, and a completed result names its call.
fn outcome(kind: ToolKind, call_id: &str, output: &Value, verdict: &mut Verdict) {
    if output["status"] != "completed" {
        return;
    }
    if kind == ToolKind::Fail {
        verdict.lost.push(format!(
            "call {call_id} of the failing tool reported completed"
        ));
    } else if !output["result"].to_string().contains(call_id) {
        verdict.lost.push(format!(
            "call {call_id} completed with another result: {}",
            output["result"]
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::CallPlan;

    fn plan() -> TurnPlan {
        TurnPlan {
            marker: "t1x0".into(),
            model_delay_ms: 0,
            calls: vec![
                CallPlan {
                    id: "t1x0c0".into(),
                    kind: ToolKind::Quick,
                    delay_ms: 5,
                },
                CallPlan {
                    id: "t1x0c1".into(),
                    kind: ToolKind::Fail,
                    delay_ms: 5,
                },
            ],
        }
    }

    fn call_part(id: &str, status_id: &str) -> Value {
        json!({"type": "tool-chaos_quick", "toolCallId": id, "state": "output-available",
               "input": {"call": id}, "output": {"status": "pending", "statusId": status_id}})
    }

    fn arrival(status_id: &str, outcome: Value) -> Value {
        let mut output = json!({"statusId": status_id, "tool": "chaos_quick"});
        for (key, value) in outcome.as_object().into_iter().flatten() {
            output[key] = value.clone();
        }
        json!({"type": "tool-async_status", "toolCallId": format!("call_{status_id}"),
               "state": "output-available", "input": {"statusId": status_id, "action": "status"},
               "output": output})
    }

    /// The conversation a correct server stores for [`plan`].
    fn good_messages() -> Value {
        let plan = plan();
        json!([
            {"id": "u", "role": "user", "parts": [{"type": "text", "text": plan.user_text()}]},
            {"id": "a", "role": "assistant", "parts": [
                {"type": "step-start"},
                call_part("t1x0c0", "s0"),
                call_part("t1x0c1", "s1"),
                {"type": "step-start"},
                {"type": "text", "text": "started t1x0", "state": "done"},
                {"type": "step-start"},
                arrival("s0", json!({"status": "completed", "result": {"call": "t1x0c0"}})),
                arrival("s1", json!({"status": "failed", "error": "planned failure"})),
                {"type": "step-start"},
                {"type": "text", "text": "done t1x0", "state": "done"},
            ]},
        ])
    }

    fn keyed(phase: Phase, key: &str) -> ModelCall {
        ModelCall {
            key: Some(key.into()),
            ..unkeyed(phase)
        }
    }

    fn unkeyed(phase: Phase) -> ModelCall {
        ModelCall {
            phase,
            key: None,
            seq: 0,
            last_user: Some("t1x0".into()),
            last_user_answered: true,
            shape: String::new(),
        }
    }

    fn verdict_of(messages: Value, model_calls: &[ModelCall]) -> Verdict {
        let first = json!({"status": "completed", "messages": messages});
        let ok = |body: Value| Answer { status: 200, body };
        judge(
            &plan(),
            &Observed {
                first: &first,
                later: &ok(first.clone()),
                conversation: &ok(json!({"messages": messages})),
                model_calls,
                shared: false,
            },
        )
    }

    fn passes() -> Vec<ModelCall> {
        vec![
            keyed(Phase::Initial, "j1.0"),
            keyed(Phase::Interim, "j1.1"),
            keyed(Phase::Continuation, "j2.0"),
        ]
    }

    #[test]
    fn a_clean_turn_has_nothing_wrong() {
        assert_eq!(verdict_of(good_messages(), &passes()), Verdict::default());
    }

    #[test]
    fn a_shared_conversation_may_grow_after_the_turn_but_not_change() {
        let snapshot = good_messages();
        let first = json!({"status": "completed", "messages": snapshot});
        let verdict_of_stored = |stored: &Value, shared: bool| {
            let ok = |body: Value| Answer { status: 200, body };
            judge(
                &plan(),
                &Observed {
                    first: &first,
                    later: &ok(first.clone()),
                    conversation: &ok(json!({"messages": stored})),
                    model_calls: &passes(),
                    shared,
                },
            )
        };
        let mut grown = good_messages();
        grown[1]["parts"]
            .as_array_mut()
            .expect("parts")
            .push(json!({"type": "step-start"}));
        grown.as_array_mut().expect("messages").push(json!(
            {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "next"}]}
        ));
        assert_eq!(verdict_of_stored(&grown, true), Verdict::default());
        assert_eq!(
            verdict_of_stored(&grown, false).lost,
            vec!["GET /async and the stored conversation disagree"]
        );
        let mut changed = grown;
        changed[0]["id"] = json!("another");
        assert_eq!(
            verdict_of_stored(&changed, true).lost,
            vec!["GET /async and the stored conversation disagree"]
        );
    }

    #[test]
    fn a_repeated_key_is_a_retry_and_a_new_key_a_duplicate() {
        let mut calls = passes();
        calls.push(keyed(Phase::Continuation, "j2.0"));
        let verdict = verdict_of(good_messages(), &calls);
        assert_eq!((verdict.retries, verdict.duplicated.len()), (1, 0));
        calls.push(keyed(Phase::Continuation, "j3.0"));
        let verdict = verdict_of(good_messages(), &calls);
        assert_eq!(verdict.duplicated.len(), 1, "{verdict:?}");
        let verdict = verdict_of(good_messages(), &vec![unkeyed(Phase::Continuation); 2]);
        assert_eq!((verdict.unkeyed, verdict.duplicated.len()), (2, 1));
    }

    #[test]
    fn a_result_injected_twice_is_a_duplicate_and_a_missing_one_is_lost() {
        let mut messages = good_messages();
        let twice = arrival(
            "s0",
            json!({"status": "completed", "result": {"call": "t1x0c0"}}),
        );
        messages[1]["parts"]
            .as_array_mut()
            .expect("parts")
            .push(twice);
        let verdict = verdict_of(messages, &passes());
        assert_eq!(verdict.duplicated.len(), 1, "{verdict:?}");
        let mut messages = good_messages();
        messages[1]["parts"]
            .as_array_mut()
            .expect("parts")
            .remove(7);
        let verdict = verdict_of(messages, &passes());
        assert_eq!(
            verdict.lost,
            vec!["the result of call t1x0c1 never arrived"]
        );
    }

    #[test]
    fn missing_calls_answers_and_users_are_lost() {
        let mut messages = good_messages();
        let parts = messages[1]["parts"].as_array_mut().expect("parts");
        parts.remove(9);
        parts.remove(2);
        let verdict = verdict_of(messages, &passes());
        assert_eq!(
            verdict.lost,
            vec![
                "1 of 2 calls are missing from the conversation: t1x0c1",
                "the final answer is missing"
            ]
        );
        let mut messages = good_messages();
        messages.as_array_mut().expect("messages").remove(0);
        let verdict = verdict_of(messages, &passes());
        assert_eq!(verdict.lost, vec!["the user message is missing"]);
    }

    #[test]
    fn a_failing_tool_reported_completed_is_lost() {
        let mut messages = good_messages();
        messages[1]["parts"][7] = arrival("s1", json!({"status": "completed", "result": {}}));
        let verdict = verdict_of(messages, &passes());
        assert_eq!(verdict.lost.len(), 1, "{verdict:?}");
    }

    #[test]
    fn failed_flipped_and_disagreeing_turns_are_lost() {
        let first = json!({"status": "failed", "error": "boom"});
        let later = Answer {
            status: 200,
            body: json!({"status": "completed"}),
        };
        let none = Answer {
            status: 404,
            body: Value::Null,
        };
        let verdict = judge(
            &plan(),
            &Observed {
                first: &first,
                later: &later,
                conversation: &none,
                model_calls: &[],
                shared: false,
            },
        );
        assert!(verdict.failed);
        assert_eq!(verdict.lost.len(), 2, "{verdict:?}");
        let first = json!({"status": "completed", "messages": good_messages()});
        let stale = Answer {
            status: 200,
            body: json!({"messages": []}),
        };
        let verdict = judge(
            &plan(),
            &Observed {
                first: &first,
                later: &Answer {
                    status: 200,
                    body: first.clone(),
                },
                conversation: &stale,
                model_calls: &passes(),
                shared: false,
            },
        );
        assert!(verdict.lost[0].contains("disagree"), "{verdict:?}");
    }
}
