//! The order of a conversation that two detached turns wrote back to back
//! (the first turn, a kill, then the second turn): the stored conversation
//! must read in the order things happened, and no model request may show a
//! later user message as if it came first.
//!
//! - The first turn's first pass (its calls, known by the call ids the
//!   chaos model gives them, and its `started` answer) lies between the two
//!   user messages; everything of the second turn lies after the second.
//! - The first turn's continuation (its arrived results and `done` answer)
//!   lies before the second user message when it ran before the second turn
//!   started, and after the second turn's first pass when it ran after, in
//!   a message of its own: no message holds parts of both turns. When it
//!   ran is read from the model's requests: after the second turn's first
//!   model request or not.
//! - No two user messages follow each other.
//! - A model request of one turn never ends with the other turn's user
//!   message unanswered (with no assistant message of that turn after it).

use std::collections::HashSet;

use serde_json::Value;

use crate::model::{ModelCall, Phase};
use crate::plan::TurnPlan;

/// The tool name arrived results are injected under.
const ASYNC_STATUS: &str = "async_status";

/// What was seen of a conversation written by two turns back to back.
pub struct BackToBack<'a> {
    /// The turn started first (before the kill).
    pub first: &'a TurnPlan,
    /// The turn started after the kill.
    pub second: &'a TurnPlan,
    /// The stored conversation's messages.
    pub messages: &'a [Value],
    /// The model requests of the first turn.
    pub first_calls: &'a [ModelCall],
    /// The model requests of the second turn.
    pub second_calls: &'a [ModelCall],
}

/// What part of a turn a piece of a stored message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// The turn's user message.
    User,
    /// Its first pass: a call, or the answer after the calls.
    Pass,
    /// Its continuation: an arrived result, or the final answer.
    Continuation,
}

/// The pieces of one turn in one message, each with what it is.
type Pieces = Vec<(Piece, String)>;

/// Why the conversation does not read in the order things happened (empty:
/// it does). A missing user message is not judged here (it is lost).
pub fn misorderings(seen: &BackToBack<'_>) -> Vec<String> {
    let messages = seen.messages;
    let mut reasons = Vec::new();
    for (at, pair) in messages.windows(2).enumerate() {
        if pair.iter().all(|message| message["role"] == "user") {
            reasons.push(format!(
                "messages {at} and {} are both user messages",
                at + 1
            ));
        }
    }
    reasons.extend(stale_requests(seen.first, seen.first_calls));
    reasons.extend(stale_requests(seen.second, seen.second_calls));
    let turns = [seen.first, seen.second];
    let launched = turns.map(|plan| status_ids(plan, messages));
    let found: Vec<[Pieces; 2]> = messages
        .iter()
        .map(|message| [0, 1].map(|turn| pieces(turns[turn], &launched[turn], message)))
        .collect();
    let user_at = |turn: usize| {
        found
            .iter()
            .position(|both| both[turn].iter().any(|(piece, _)| *piece == Piece::User))
    };
    let (Some(first_user), Some(second_user)) = (user_at(0), user_at(1)) else {
        return reasons;
    };
    if second_user < first_user {
        reasons.push(format!(
            "{}'s user message (message {second_user}) is stored before {}'s (message {first_user})",
            seen.second.marker, seen.first.marker
        ));
        return reasons;
    }
    let second_pass_end = found
        .iter()
        .rposition(|both| both[1].iter().any(|(piece, _)| *piece == Piece::Pass))
        .unwrap_or(second_user);
    let ran_after = continuation_ran_after(seen.first_calls, seen.second_calls);
    let (first, second) = (&seen.first.marker, &seen.second.marker);
    for (at, [mine, theirs]) in found.iter().enumerate() {
        let id = messages[at]["id"].as_str().unwrap_or("?");
        let pass = described(mine, Piece::Pass);
        let continuation = described(mine, Piece::Continuation);
        let later = [
            described(theirs, Piece::Pass),
            described(theirs, Piece::Continuation),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
        if let (Some(earlier), Some(later)) =
            (pass.as_ref().or(continuation.as_ref()), later.first())
        {
            reasons.push(format!(
                "message {at} ({id}) holds parts of both turns: {first}'s {earlier} and {second}'s {later}"
            ));
        }
        let between = first_user < at && at < second_user;
        if let Some(pass) = pass.filter(|_| !between) {
            reasons.push(format!(
                "{first}'s first pass ({pass}) is in message {at}, not between the user messages \
                 ({first_user} and {second_user})"
            ));
        }
        if let Some(continuation) = continuation {
            let after = at > second_pass_end;
            let wrong = match ran_after {
                _ if !between && !after => Some(format!(
                    "is in message {at}, after {second}'s user message ({second_user}) but not after \
                     its first pass (message {second_pass_end})"
                )),
                Some(true) if between => Some(format!(
                    "ran after {second}'s first model request but is in message {at}, before \
                     {second}'s user message ({second_user})"
                )),
                Some(false) if after => Some(format!(
                    "ran before {second}'s first model request but is in message {at}, after \
                     {second}'s user message ({second_user})"
                )),
                _ => None,
            };
            if let Some(wrong) = wrong {
                reasons.push(format!("{first}'s continuation ({continuation}) {wrong}"));
            }
        }
        if let Some(later) = later.first().filter(|_| at <= second_user) {
            reasons.push(format!(
                "{second}'s {later} is in message {at}, not after its user message ({second_user})"
            ));
        }
    }
    reasons
}

/// Requests of `plan`'s turn whose last user message is another turn's and
/// unanswered.
fn stale_requests(plan: &TurnPlan, calls: &[ModelCall]) -> Vec<String> {
    calls
        .iter()
        .filter(|call| {
            !call.last_user_answered && call.last_user.as_deref() != Some(plan.marker.as_str())
        })
        .map(|call| {
            format!(
                "{}'s {:?} model request (#{}) ended with {}'s user message unanswered: {}",
                plan.marker,
                call.phase,
                call.seq,
                call.last_user.as_deref().unwrap_or("an unknown turn"),
                call.shape
            )
        })
        .collect()
}

/// Whether the first turn's last continuation request came after the
/// second turn's first request (`None`: one of them never came).
fn continuation_ran_after(first: &[ModelCall], second: &[ModelCall]) -> Option<bool> {
    let continued = first
        .iter()
        .filter(|call| call.phase == Phase::Continuation)
        .map(|call| call.seq)
        .max()?;
    let started = second
        .iter()
        .filter(|call| call.phase == Phase::Initial)
        .map(|call| call.seq)
        .min()?;
    Some(continued > started)
}

/// `kind`'s pieces, named: the first, and how many more.
fn described(pieces: &Pieces, kind: Piece) -> Option<String> {
    let mut named = pieces
        .iter()
        .filter(|(piece, _)| *piece == kind)
        .map(|(_, what)| what);
    let first = named.next()?;
    let more = named.count();
    Some(match more {
        0 => first.clone(),
        _ => format!("{first} and {more} more"),
    })
}

/// The status ids of `plan`'s launched calls, from their pending results.
fn status_ids(plan: &TurnPlan, messages: &[Value]) -> HashSet<String> {
    messages
        .iter()
        .filter_map(|message| message["parts"].as_array())
        .flatten()
        .filter(|part| {
            part["toolCallId"]
                .as_str()
                .is_some_and(|id| plan.owns_call(id))
        })
        .filter_map(|part| part["output"]["statusId"].as_str().map(str::to_owned))
        .collect()
}

/// The pieces of `plan`'s turn in `message`.
fn pieces(plan: &TurnPlan, status_ids: &HashSet<String>, message: &Value) -> Pieces {
    let parts = message["parts"].as_array().map_or(&[][..], Vec::as_slice);
    let text = |part: &Value| part["text"].as_str().map(str::trim).map(str::to_owned);
    if message["role"] == "user" {
        let own = parts
            .iter()
            .any(|part| text(part).as_deref() == Some(plan.user_text().as_str()));
        return if own {
            vec![(Piece::User, "user message".to_owned())]
        } else {
            Vec::new()
        };
    }
    parts
        .iter()
        .filter_map(|part| {
            let call_id = part["toolCallId"].as_str();
            let status_id = |field: &str| part[field]["statusId"].as_str();
            if let Some(id) = call_id.filter(|id| plan.owns_call(id)) {
                return Some((Piece::Pass, format!("call {id}")));
            }
            if part["type"] == format!("tool-{ASYNC_STATUS}") {
                let arrived = status_id("input")
                    .or_else(|| status_id("output"))
                    .filter(|id| status_ids.contains(*id))?;
                return Some((Piece::Continuation, format!("result of {arrived}")));
            }
            if part["type"] != "text" {
                return None;
            }
            match text(part)? {
                said if said == plan.interim_text() => Some((Piece::Pass, format!("{said:?}"))),
                said if said == plan.final_text() => {
                    Some((Piece::Continuation, format!("{said:?}")))
                }
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::{CallPlan, ToolKind};

    fn plan(marker: &str, calls: usize) -> TurnPlan {
        TurnPlan {
            marker: marker.into(),
            model_delay_ms: 0,
            calls: (0..calls)
                .map(|index| CallPlan {
                    id: format!("{marker}c{index}"),
                    kind: ToolKind::Quick,
                    delay_ms: 5,
                })
                .collect(),
        }
    }

    fn first() -> TurnPlan {
        plan("t4x0", 2)
    }

    fn second() -> TurnPlan {
        plan("t4x1", 1)
    }

    fn user(plan: &TurnPlan) -> Value {
        json!({"id": format!("u-{}", plan.marker), "role": "user",
               "parts": [{"type": "text", "text": plan.user_text()}]})
    }

    fn assistant(id: &str, parts: Vec<Value>) -> Value {
        json!({"id": id, "role": "assistant", "parts": parts})
    }

    fn text(text: &str) -> Value {
        json!({"type": "text", "text": text, "state": "done"})
    }

    /// A turn's first pass: its calls (status id `s-<call id>`) and answer.
    fn first_pass(plan: &TurnPlan) -> Vec<Value> {
        let mut parts = vec![json!({"type": "step-start"})];
        parts.extend(plan.calls.iter().map(|call| {
            json!({"type": "tool-chaos_quick", "toolCallId": call.id, "state": "output-available",
                   "input": {"call": call.id},
                   "output": {"status": "pending", "statusId": format!("s-{}", call.id)}})
        }));
        parts.push(json!({"type": "step-start"}));
        parts.push(text(&plan.interim_text()));
        parts
    }

    /// A turn's continuation: its arrived results and final answer.
    fn continuation(plan: &TurnPlan) -> Vec<Value> {
        let mut parts = vec![json!({"type": "step-start"})];
        parts.extend(plan.calls.iter().map(|call| {
            let status_id = format!("s-{}", call.id);
            json!({"type": "tool-async_status", "toolCallId": format!("call_{status_id}"),
                   "state": "output-available",
                   "input": {"statusId": status_id, "action": "status"},
                   "output": {"statusId": status_id, "status": "completed"}})
        }));
        parts.push(json!({"type": "step-start"}));
        parts.push(text(&plan.final_text()));
        parts
    }

    fn request(phase: Phase, seq: u64, last_user: &TurnPlan) -> ModelCall {
        ModelCall {
            phase,
            key: Some(format!("k{seq}")),
            seq,
            last_user: Some(last_user.marker.clone()),
            last_user_answered: true,
            shape: String::new(),
        }
    }

    /// The requests when the first turn's continuation came at `continued`
    /// and the second turn started at 10.
    fn requests(continued: u64) -> (Vec<ModelCall>, Vec<ModelCall>) {
        let (first, second) = (first(), second());
        let earlier = vec![
            request(Phase::Initial, 1, &first),
            request(Phase::Interim, 2, &first),
            request(Phase::Continuation, continued, &first),
        ];
        let later = vec![
            request(Phase::Initial, 10, &second),
            request(Phase::Interim, 11, &second),
            request(Phase::Continuation, 20, &second),
        ];
        (earlier, later)
    }

    fn reasons(messages: &[Value], continued: u64) -> Vec<String> {
        let (first_calls, second_calls) = requests(continued);
        misorderings(&BackToBack {
            first: &first(),
            second: &second(),
            messages,
            first_calls: &first_calls,
            second_calls: &second_calls,
        })
    }

    fn joined(parts: [Vec<Value>; 2]) -> Vec<Value> {
        parts.concat()
    }

    #[test]
    fn a_continuation_before_the_second_turn_reads_in_order() {
        let (first, second) = (first(), second());
        let messages = [
            user(&first),
            assistant("a1", joined([first_pass(&first), continuation(&first)])),
            user(&second),
            assistant("a2", joined([first_pass(&second), continuation(&second)])),
        ];
        assert_eq!(reasons(&messages, 5), Vec::<String>::new());
    }

    #[test]
    fn a_continuation_after_the_second_turn_reads_after_it() {
        let (first, second) = (first(), second());
        let messages = [
            user(&first),
            assistant("a1", first_pass(&first)),
            user(&second),
            assistant("a2", first_pass(&second)),
            assistant("a3", continuation(&first)),
            assistant("a4", continuation(&second)),
        ];
        assert_eq!(reasons(&messages, 15), Vec::<String>::new());
    }

    #[test]
    fn restored_calls_inside_the_later_turns_message_are_misordered() {
        let (first, second) = (first(), second());
        let messages = [
            user(&first),
            user(&second),
            assistant("a2", joined([first_pass(&second), first_pass(&first)])),
        ];
        let found = reasons(&messages, 15);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].contains("both user messages"), "{found:#?}");
        assert!(found[1].contains("holds parts of both turns"), "{found:#?}");
        assert!(found[2].contains("t4x0's first pass (call t4x0c0 and 2 more)"));
    }

    #[test]
    fn a_continuation_inside_the_later_turns_message_is_misordered() {
        let (first, second) = (first(), second());
        let messages = [
            user(&first),
            assistant("a1", first_pass(&first)),
            user(&second),
            assistant("a2", joined([first_pass(&second), continuation(&first)])),
        ];
        let found = reasons(&messages, 15);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].contains("holds parts of both turns"), "{found:#?}");
        assert!(
            found[1].contains("but not after its first pass"),
            "{found:#?}"
        );
    }

    #[test]
    fn a_continuation_stored_against_the_order_it_ran_in_is_misordered() {
        let (first, second) = (first(), second());
        let before = [
            user(&first),
            assistant("a1", joined([first_pass(&first), continuation(&first)])),
            user(&second),
            assistant("a2", first_pass(&second)),
        ];
        let found = reasons(&before, 15);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("ran after t4x1's first model request"));
        let after = [
            user(&first),
            assistant("a1", first_pass(&first)),
            user(&second),
            assistant("a2", first_pass(&second)),
            assistant("a3", continuation(&first)),
        ];
        let found = reasons(&after, 5);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("ran before t4x1's first model request"));
    }

    #[test]
    fn a_request_ending_with_the_other_turns_unanswered_user_message_is_misordered() {
        let (first, second) = (first(), second());
        let messages = [
            user(&first),
            assistant("a1", first_pass(&first)),
            user(&second),
            assistant("a2", first_pass(&second)),
            assistant("a3", continuation(&first)),
        ];
        let (mut first_calls, second_calls) = requests(15);
        first_calls[2].last_user = Some(second.marker.clone());
        first_calls[2].last_user_answered = false;
        first_calls[2].shape = "U:t4x0 A:t4x0x2 U:t4x1 S:t4x0x2".into();
        let found = misorderings(&BackToBack {
            first: &first,
            second: &second,
            messages: &messages,
            first_calls: &first_calls,
            second_calls: &second_calls,
        });
        assert_eq!(
            found,
            vec![
                "t4x0's Continuation model request (#15) ended with t4x1's user message \
                 unanswered: U:t4x0 A:t4x0x2 U:t4x1 S:t4x0x2"
            ]
        );
    }
}
