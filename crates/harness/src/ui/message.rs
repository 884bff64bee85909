//! `UIMessage`s as the AI SDK shapes them, and how stream chunks build them.
//! Parts this server does not produce (files, reasoning, data parts) are
//! kept as they came.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Map, Value};

use super::UiChunk;

/// A message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UiMessage {
    /// Message id.
    pub id: String,
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// The content, in order.
    pub parts: Vec<UiPart>,
    /// Client metadata, kept as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// One part of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum UiPart {
    /// Marks the start of a model pass.
    StepStart,
    /// Text.
    Text {
        /// The text.
        text: String,
        /// `streaming` or `done`.
        state: Option<String>,
    },
    /// A tool call and its outcome (boxed: it is far larger than the
    /// other parts).
    Tool(Box<ToolPart>),
    /// Any other part, kept verbatim.
    Other(Value),
}

/// Where a tool call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolState {
    /// Arguments are arriving.
    InputStreaming,
    /// Arguments are complete; the call runs.
    InputAvailable,
    /// Waiting for a person.
    ApprovalRequested,
    /// A person decided; the server acts on it next.
    ApprovalResponded,
    /// Output is present.
    OutputAvailable,
    /// The call failed.
    OutputError,
    /// A person denied the call.
    OutputDenied,
}

/// A person's decision on a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// The approval id from `tool-approval-request`.
    pub id: String,
    /// The decision, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    /// Why, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A tool invocation part (`tool-<name>`, or `dynamic-tool`).
///
/// Stored and sent as the AI SDK's `UIMessage` schema allows for its state
/// (6.x and 7.x alike): `input` in every state (optional while streaming and
/// after an error), `approval` from `approval-requested` on (only a granted
/// one on `output-available` and `output-error`), `output` and `preliminary`
/// on `output-available` only, `errorText` on `output-error` only. A field
/// the state does not allow is never written, and `output` or `errorText`
/// on a state without them (earlier releases kept a failed call's last
/// preliminary output) is not read.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPart {
    /// Model-facing tool name.
    pub tool_name: String,
    /// Whether the part is a `dynamic-tool` part.
    pub dynamic: bool,
    /// Call id.
    pub tool_call_id: String,
    /// Where the call stands.
    pub state: ToolState,
    /// The input, once known.
    pub input: Option<Value>,
    /// The output, for `output-available`.
    pub output: Option<Value>,
    /// The error, for `output-error`.
    pub error_text: Option<String>,
    /// The approval, for calls that needed one.
    pub approval: Option<Approval>,
    /// Whether `output` is a preliminary snapshot.
    pub preliminary: bool,
    /// What the provider attached to the call, by provider; sent back with
    /// it (`callProviderMetadata`).
    pub call_provider_metadata: Option<Value>,
}

impl ToolPart {
    /// Whether the call has reached an outcome the model can be told about.
    pub fn is_settled(&self) -> bool {
        matches!(
            self.state,
            ToolState::OutputAvailable | ToolState::OutputError | ToolState::OutputDenied
        ) && !self.preliminary
    }

    /// Whether a person approved the call.
    pub fn is_approved(&self) -> bool {
        self.approval.as_ref().and_then(|a| a.approved) == Some(true)
    }

    /// The error text of this call failing with `error` now. A call that
    /// yielded preliminary outputs loses them when it fails (an error part
    /// has no `output`, and the AI SDK client drops it too), so the last one
    /// is carried in the text: the page shows it, and the model is told it.
    pub fn failure_text(&self, error: &str) -> String {
        match (self.state, &self.output) {
            (ToolState::OutputAvailable, Some(output)) if self.preliminary => {
                format!("{error}; its last output before that was {output}")
            }
            _ => error.to_owned(),
        }
    }

    /// Ends the call with `error_text` (see [`Self::failure_text`]).
    pub fn fail(&mut self, error_text: String) {
        self.state = ToolState::OutputError;
        self.error_text = Some(error_text);
        self.output = None;
        self.preliminary = false;
    }

    /// The approval, where the state allows it: any from
    /// `approval-requested` on, but only a granted one on a call that ran.
    fn allowed_approval(&self) -> Option<&Approval> {
        let approval = self.approval.as_ref()?;
        match self.state {
            ToolState::InputStreaming | ToolState::InputAvailable => None,
            ToolState::OutputAvailable | ToolState::OutputError => {
                self.is_approved().then_some(approval)
            }
            ToolState::ApprovalRequested
            | ToolState::ApprovalResponded
            | ToolState::OutputDenied => Some(approval),
        }
    }

    fn to_value(&self) -> Value {
        let mut part = Map::new();
        if self.dynamic {
            part.insert("type".into(), json!("dynamic-tool"));
            part.insert("toolName".into(), json!(self.tool_name));
        } else {
            part.insert("type".into(), json!(format!("tool-{}", self.tool_name)));
        }
        part.insert("toolCallId".into(), json!(self.tool_call_id));
        part.insert("state".into(), json!(self.state));
        match (&self.input, self.state) {
            (Some(input), _) => {
                part.insert("input".into(), input.clone());
            }
            (None, ToolState::InputStreaming | ToolState::OutputError) => {}
            (None, _) => {
                part.insert("input".into(), Value::Null);
            }
        }
        match self.state {
            ToolState::OutputAvailable => {
                part.insert("output".into(), self.output.clone().unwrap_or(Value::Null));
                if self.preliminary {
                    part.insert("preliminary".into(), json!(true));
                }
            }
            ToolState::OutputError => {
                let error = self.error_text.clone().unwrap_or_default();
                part.insert("errorText".into(), json!(error));
            }
            _ => {}
        }
        if let Some(approval) = self.allowed_approval() {
            part.insert("approval".into(), json!(approval));
        }
        if let Some(metadata) = &self.call_provider_metadata {
            part.insert("callProviderMetadata".into(), metadata.clone());
        }
        Value::Object(part)
    }

    fn from_value(value: &Value, kind: &str) -> Option<Self> {
        let (tool_name, dynamic) = match kind.strip_prefix("tool-") {
            Some(name) => (name.to_owned(), false),
            None => (value.get("toolName")?.as_str()?.to_owned(), true),
        };
        let state: ToolState = serde_json::from_value(value.get("state")?.clone()).ok()?;
        let has_output = state == ToolState::OutputAvailable;
        Some(Self {
            tool_name,
            dynamic,
            tool_call_id: value.get("toolCallId")?.as_str()?.to_owned(),
            state,
            input: value.get("input").cloned().filter(|v| !v.is_null()),
            output: value.get("output").cloned().filter(|_| has_output),
            error_text: value
                .get("errorText")
                .and_then(Value::as_str)
                .filter(|_| state == ToolState::OutputError)
                .map(str::to_owned),
            approval: value
                .get("approval")
                .and_then(|a| serde_json::from_value(a.clone()).ok()),
            preliminary: has_output && value.get("preliminary") == Some(&Value::Bool(true)),
            call_provider_metadata: value
                .get("callProviderMetadata")
                .filter(|metadata| metadata.is_object())
                .cloned(),
        })
    }
}

impl Serialize for UiPart {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::StepStart => json!({"type": "step-start"}).serialize(serializer),
            Self::Text { text, state } => {
                let mut part = json!({"type": "text", "text": text});
                if let Some(state) = state {
                    part["state"] = json!(state);
                }
                part.serialize(serializer)
            }
            Self::Tool(tool) => tool.to_value().serialize(serializer),
            Self::Other(value) => value.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for UiPart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| serde::de::Error::custom("a message part needs a string `type`"))?
            .to_owned();
        Ok(match kind.as_str() {
            "step-start" => Self::StepStart,
            "text" => Self::Text {
                text: value
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| serde::de::Error::custom("a text part needs `text`"))?
                    .to_owned(),
                state: value
                    .get("state")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            k if k.starts_with("tool-") || k == "dynamic-tool" => ToolPart::from_value(&value, k)
                .map(|tool| Self::Tool(Box::new(tool)))
                .ok_or_else(|| {
                    serde::de::Error::custom(
                        "a tool part needs `toolCallId`, a known `state` and (dynamic) `toolName`",
                    )
                })?,
            _ => Self::Other(value),
        })
    }
}

impl UiMessage {
    /// An empty assistant message.
    pub fn assistant(id: String) -> Self {
        Self {
            id,
            role: "assistant".into(),
            parts: Vec::new(),
            metadata: None,
        }
    }

    /// A message as some release of this server stored it, as this release
    /// writes it: each part with only the fields its state allows. A value
    /// that is not a message this server reads is returned as it is.
    pub fn rewrite_stored(stored: Value) -> Value {
        serde_json::from_value::<Self>(stored.clone())
            .and_then(serde_json::to_value)
            .unwrap_or(stored)
    }

    /// The text of the message's text parts, joined.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|part| match part {
                UiPart::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool part of `tool_call_id`, if any.
    pub fn tool_part(&self, tool_call_id: &str) -> Option<&ToolPart> {
        self.tool_parts()
            .find(|tool| tool.tool_call_id == tool_call_id)
    }

    /// The tool part of `tool_call_id`, if any, to change.
    pub fn tool_part_mut(&mut self, tool_call_id: &str) -> Option<&mut ToolPart> {
        self.parts.iter_mut().find_map(|part| match part {
            UiPart::Tool(tool) if tool.tool_call_id == tool_call_id => Some(&mut **tool),
            _ => None,
        })
    }

    /// Tool parts, in order.
    pub fn tool_parts(&self) -> impl Iterator<Item = &ToolPart> {
        self.parts.iter().filter_map(|part| match part {
            UiPart::Tool(tool) => Some(&**tool),
            _ => None,
        })
    }

    /// Applies one chunk the way the AI SDK client does, so the stored
    /// message is the one the client ends up with.
    pub fn apply(&mut self, chunk: &UiChunk) {
        match chunk {
            UiChunk::Start { message_id } => self.id.clone_from(message_id),
            UiChunk::StartStep => self.parts.push(UiPart::StepStart),
            UiChunk::DataAuthorization { id, data } => {
                self.parts.push(UiPart::Other(serde_json::json!({
                    "type": "data-authorization",
                    "id": id,
                    "data": data,
                })));
            }
            UiChunk::TextStart { .. } => self.parts.push(UiPart::Text {
                text: String::new(),
                state: Some("streaming".into()),
            }),
            UiChunk::TextDelta { delta, .. } => {
                if let Some(UiPart::Text { text, .. }) = self.open_text() {
                    text.push_str(delta);
                }
            }
            UiChunk::TextEnd { .. } => {
                if let Some(UiPart::Text { state, .. }) = self.open_text() {
                    *state = Some("done".into());
                }
            }
            UiChunk::ToolInputStart {
                tool_call_id,
                tool_name,
            } => self.parts.push(UiPart::Tool(Box::new(ToolPart {
                tool_name: tool_name.clone(),
                dynamic: false,
                tool_call_id: tool_call_id.clone(),
                state: ToolState::InputStreaming,
                input: None,
                output: None,
                error_text: None,
                approval: None,
                preliminary: false,
                call_provider_metadata: None,
            }))),
            UiChunk::ToolInputDelta { .. } => {}
            UiChunk::ToolInputAvailable {
                tool_call_id,
                tool_name,
                input,
                provider_metadata,
            } => {
                if let Some(part) = self.ensure_tool_part(tool_call_id, tool_name) {
                    part.state = ToolState::InputAvailable;
                    part.input = Some(input.clone());
                    part.call_provider_metadata.clone_from(provider_metadata);
                }
            }
            UiChunk::ToolInputError {
                tool_call_id,
                tool_name,
                input,
                error_text,
            } => {
                if let Some(part) = self.ensure_tool_part(tool_call_id, tool_name) {
                    part.input = Some(input.clone());
                    part.fail(error_text.clone());
                }
            }
            UiChunk::ToolApprovalRequest {
                approval_id,
                tool_call_id,
            } => {
                if let Some(part) = self.tool_part_mut(tool_call_id) {
                    part.state = ToolState::ApprovalRequested;
                    part.approval = Some(Approval {
                        id: approval_id.clone(),
                        approved: None,
                        reason: None,
                    });
                }
            }
            UiChunk::ToolOutputAvailable {
                tool_call_id,
                output,
                preliminary,
            } => {
                if let Some(part) = self.tool_part_mut(tool_call_id) {
                    part.state = ToolState::OutputAvailable;
                    part.output = Some(output.clone());
                    part.preliminary = preliminary.unwrap_or(false);
                }
            }
            UiChunk::ToolOutputError {
                tool_call_id,
                error_text,
            } => {
                if let Some(part) = self.tool_part_mut(tool_call_id) {
                    part.fail(error_text.clone());
                }
            }
            UiChunk::ToolOutputDenied { tool_call_id } => {
                if let Some(part) = self.tool_part_mut(tool_call_id) {
                    part.state = ToolState::OutputDenied;
                    part.output = None;
                    part.preliminary = false;
                }
            }
            UiChunk::SourceUrl { .. } => {
                if let Ok(part) = serde_json::to_value(chunk) {
                    self.parts.push(UiPart::Other(part));
                }
            }
            UiChunk::Finish {
                message_metadata: Some(Value::Object(added)),
                ..
            } => {
                let mut metadata = match self.metadata.take() {
                    Some(Value::Object(metadata)) => metadata,
                    _ => serde_json::Map::new(),
                };
                metadata.extend(added.clone());
                self.metadata = Some(Value::Object(metadata));
            }
            UiChunk::FinishStep
            | UiChunk::Finish { .. }
            | UiChunk::Error { .. }
            | UiChunk::Abort => {}
        }
    }

    fn open_text(&mut self) -> Option<&mut UiPart> {
        self.parts
            .iter_mut()
            .rev()
            .find(|part| matches!(part, UiPart::Text { state: Some(s), .. } if s == "streaming"))
    }

    fn ensure_tool_part(&mut self, tool_call_id: &str, tool_name: &str) -> Option<&mut ToolPart> {
        if self.tool_part_mut(tool_call_id).is_none() {
            self.apply(&UiChunk::ToolInputStart {
                tool_call_id: tool_call_id.to_owned(),
                tool_name: tool_name.to_owned(),
            });
        }
        self.tool_part_mut(tool_call_id)
    }
}

#[cfg(test)]
mod tests;
