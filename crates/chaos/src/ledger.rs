//! The verdict of the tool-call ledger on one settled turn: every call the
//! turn launched is on the record once per attempt, numbered from 1 with no
//! gap, every attempt ended, each before the last ended `runner_lost` (it
//! was launched again), and the last ended as the result the model was
//! given says (`ok` for a completed call, a failure for a failed one).

use serde_json::Value;

use crate::checks::{tool_parts, Verdict};
use crate::plan::TurnPlan;

/// The tool name arrived results are injected under.
const ASYNC_STATUS: &str = "async_status";

/// Judges `attempts` (the conversation's page of `GET /tool-calls`) against
/// the calls of `plan` that the stored `messages` show launched.
pub fn judge(plan: &TurnPlan, messages: &[Value], attempts: &[Value], verdict: &mut Verdict) {
    let tools = tool_parts(messages);
    for call in &plan.calls {
        let Some(part) = tools.iter().find(|t| t.call_id == call.id) else {
            continue;
        };
        if part.output["status"] != "pending" {
            continue;
        }
        let Some(status_id) = part.output["statusId"].as_str() else {
            continue;
        };
        let delivered = tools
            .iter()
            .find(|t| t.name == ASYNC_STATUS && t.input["statusId"] == status_id)
            .and_then(|arrival| arrival.output["status"].as_str());
        let mut mine: Vec<&Value> = attempts
            .iter()
            .filter(|attempt| attempt["toolCallId"] == call.id.as_str())
            .collect();
        mine.sort_by_key(|attempt| attempt["attempt"].as_i64());
        verdict.attempts += mine.len();
        for problem in attempts_problems(&call.id, &mine, delivered) {
            verdict.unrecorded.push(problem);
        }
    }
}

/// What is wrong with the `attempts` of call `id` (in attempt order), whose
/// delivered result had status `delivered`.
fn attempts_problems(id: &str, attempts: &[&Value], delivered: Option<&str>) -> Vec<String> {
    let Some((last, earlier)) = attempts.split_last() else {
        return vec![format!("call {id} is not on the ledger")];
    };
    let mut problems = Vec::new();
    let numbers: Vec<i64> = attempts
        .iter()
        .filter_map(|a| a["attempt"].as_i64())
        .collect();
    let expected: Vec<i64> = (1..=attempts.len() as i64).collect();
    if numbers != expected {
        problems.push(format!("call {id} has attempts {numbers:?} on the ledger"));
    }
    for attempt in attempts {
        if attempt["status"] == "running" {
            problems.push(format!(
                "attempt {} of call {id} never ended on the ledger",
                attempt["attempt"]
            ));
        }
    }
    for attempt in earlier {
        if attempt["status"] != "runner_lost" {
            problems.push(format!(
                "attempt {} of call {id} was followed by another but ended {}",
                attempt["attempt"], attempt["status"]
            ));
        }
    }
    let ended = last["status"].as_str().unwrap_or_default();
    let agrees = match delivered {
        Some("completed") => ended == "ok",
        Some(_) => !matches!(ended, "ok" | "running"),
        None => true,
    };
    if !agrees {
        problems.push(format!(
            "call {id} was delivered {} but its last attempt ended {ended}",
            delivered.unwrap_or_default()
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn attempt(n: i64, status: &str) -> Value {
        json!({"toolCallId": "c1", "attempt": n, "status": status})
    }

    #[test]
    fn a_relaunched_call_reads_runner_lost_then_its_outcome() {
        let (lost, ok) = (attempt(1, "runner_lost"), attempt(2, "ok"));
        assert!(attempts_problems("c1", &[&lost, &ok], Some("completed")).is_empty());
    }

    #[test]
    fn gaps_open_attempts_and_disagreements_are_found() {
        let (first, third) = (attempt(1, "tool_error"), attempt(3, "running"));
        let problems = attempts_problems("c1", &[&first, &third], Some("completed"));
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert_eq!(
            attempts_problems("c1", &[], Some("failed")),
            ["call c1 is not on the ledger"]
        );
        let failed = attempt(1, "ok");
        assert_eq!(attempts_problems("c1", &[&failed], Some("failed")).len(), 1);
    }
}
