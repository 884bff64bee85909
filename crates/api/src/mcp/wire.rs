//! Our tools, outputs and tasks in MCP's terms.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, JsonObject, MetaObject, Task, TaskPayload,
    TaskStatus, Tool, ToolAnnotations, TASKS_EXTENSION_ID,
};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_domain::{CallStatus, ToolEffects};
use toolserver_harness::tools::RegisteredTool;
use toolserver_store::mcp_tasks::TaskRecord;

/// JSON-RPC's internal-error code, for a task that failed outside its tool.
const INTERNAL_ERROR: i64 = -32603;

/// `tool` as `tools/list` shows it: uploaded tools say they take tasks, and
/// every tool's annotations state its effects.
pub fn tool(tool: &RegisteredTool) -> Tool {
    let schema = match &tool.input_schema {
        Value::Object(schema) => schema.clone(),
        _ => JsonObject::from_iter([("type".to_owned(), json!("object"))]),
    };
    let mut listed = Tool::new(
        tool.name.clone(),
        tool.description.clone(),
        Arc::new(schema),
    );
    let task_support = match tool.detachable() {
        true => "optional",
        false => "forbidden",
    };
    listed.meta = Some(MetaObject(JsonObject::from_iter([(
        TASKS_EXTENSION_ID.to_owned(),
        json!({ "taskSupport": task_support }),
    )])));
    listed.with_annotations(annotations(tool.effects, tool.open_world))
}

/// MCP's hints for a tool with `effects`: `read` is read-only (so neither
/// destructive nor changed by a repeat), `idempotent` is additive and
/// unchanged by a repeat, `side_effect` is destructive. Every hint is
/// stated, since MCP's defaults (destructive, open world) are not ours.
fn annotations(effects: ToolEffects, open_world: bool) -> ToolAnnotations {
    let (read_only, destructive, idempotent) = match effects {
        ToolEffects::Read => (true, false, true),
        ToolEffects::Idempotent => (false, false, true),
        ToolEffects::SideEffect => (false, true, false),
    };
    ToolAnnotations::from_raw(
        None,
        Some(read_only),
        Some(destructive),
        Some(idempotent),
        Some(open_world),
    )
}

/// A tool's output as a successful call: the text (a string as it is,
/// anything else as JSON), and an object output as structured content too.
pub fn output(value: Value) -> CallToolResult {
    let text = match &value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    if let Value::Object(object) = value {
        result.structured_content = Some(Value::Object(object));
    }
    result
}

/// A tool's failure as a tool error the model can read.
pub fn failure(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// A stored task as `tasks/get` answers it.
pub fn detailed(record: &TaskRecord, inline_window: Duration) -> DetailedTask {
    let payload = match record.status {
        CallStatus::Pending => TaskPayload::Working,
        CallStatus::Completed => TaskPayload::Completed {
            result: result_object(output(record.response.clone().unwrap_or(Value::Null))),
        },
        CallStatus::Failed => TaskPayload::Completed {
            result: result_object(failure(
                record
                    .error
                    .clone()
                    .unwrap_or_else(|| "the tool failed".into()),
            )),
        },
        CallStatus::Expired => TaskPayload::Failed {
            error: JsonObject::from_iter([
                ("code".to_owned(), json!(INTERNAL_ERROR)),
                (
                    "message".to_owned(),
                    json!(record
                        .error
                        .clone()
                        .unwrap_or_else(|| "the task expired".into())),
                ),
            ]),
        },
        CallStatus::Cancelled => TaskPayload::Cancelled,
    };
    DetailedTask::new(task(record, inline_window), payload)
}

/// The task's base fields. Its poll interval follows its age: half of it
/// (the call is as likely to run on as long again), at least half the
/// inline window and at most the task's longest interval.
pub fn task(record: &TaskRecord, inline_window: Duration) -> Task {
    let ttl = (record.hard_expires_at - record.created_at).whole_milliseconds();
    let mut task = Task::new(
        record.id.to_string(),
        status(record.status),
        timestamp(record.created_at),
        timestamp(record.updated_at),
    )
    .with_ttl_ms(u64::try_from(ttl).unwrap_or(0))
    .with_poll_interval_ms(poll_interval_ms(record, inline_window));
    if record.status == CallStatus::Pending {
        if let Some(progress) = &record.progress {
            task = task.with_status_message(progress.to_string());
        }
    }
    task
}

/// The poll interval `record` suggests now, in milliseconds.
fn poll_interval_ms(record: &TaskRecord, inline_window: Duration) -> u64 {
    let longest = u64::try_from(record.task_poll_ms).unwrap_or(1).max(1);
    let shortest = u64::try_from(inline_window.as_millis() / 2)
        .unwrap_or(u64::MAX)
        .clamp(1, longest);
    let half_age = u64::try_from(record.age_ms / 2).unwrap_or(0);
    half_age.clamp(shortest, longest)
}

fn status(status: CallStatus) -> TaskStatus {
    match status {
        CallStatus::Pending => TaskStatus::Working,
        CallStatus::Completed | CallStatus::Failed => TaskStatus::Completed,
        CallStatus::Expired => TaskStatus::Failed,
        CallStatus::Cancelled => TaskStatus::Cancelled,
    }
}

fn result_object(result: CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

fn timestamp(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use time::OffsetDateTime;
    use toolserver_domain::{CallStatus, ResultId};
    use toolserver_store::mcp_tasks::TaskRecord;

    use super::*;

    fn aged(age_ms: i64) -> TaskRecord {
        let now = OffsetDateTime::now_utc();
        TaskRecord {
            id: ResultId::generate(),
            tool_name: "slow".into(),
            tool_id: None,
            status: CallStatus::Pending,
            response: None::<Value>,
            error: None,
            progress: None,
            created_at: now,
            updated_at: now,
            hard_expires_at: now,
            task_poll_ms: 1000,
            age_ms,
        }
    }

    #[test]
    fn a_task_suggests_half_its_age_within_its_bounds() {
        let window = Duration::from_millis(250);
        assert_eq!(poll_interval_ms(&aged(0), window), 125);
        assert_eq!(poll_interval_ms(&aged(600), window), 300);
        assert_eq!(poll_interval_ms(&aged(60_000), window), 1000);
        // Without an inline window a new task may be polled at once.
        assert_eq!(poll_interval_ms(&aged(0), Duration::ZERO), 1);
        // A window longer than twice the longest interval is capped by it.
        assert_eq!(poll_interval_ms(&aged(0), Duration::from_secs(5)), 1000);
    }

    #[test]
    fn each_effect_has_its_hints() {
        let hints = |effects| {
            let a = annotations(effects, false);
            (a.read_only_hint, a.destructive_hint, a.idempotent_hint)
        };
        assert_eq!(
            hints(ToolEffects::Read),
            (Some(true), Some(false), Some(true))
        );
        assert_eq!(
            hints(ToolEffects::Idempotent),
            (Some(false), Some(false), Some(true))
        );
        assert_eq!(
            hints(ToolEffects::SideEffect),
            (Some(false), Some(true), Some(false))
        );
        assert_eq!(
            annotations(ToolEffects::Read, true).open_world_hint,
            Some(true)
        );
    }
}
