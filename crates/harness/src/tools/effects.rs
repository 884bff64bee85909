//! What a registered tool's calls do to the world and how they are retried:
//! the tool declares it (an uploaded tool's manifest, a built-in's fixed
//! effects, a remote MCP tool's annotations), and the agent config may
//! narrow the effects, never widen them. A config being saved is refused
//! for what does not hold; a stored one keeps loading, with warnings.

use rmcp::model::Tool;
use toolserver_domain::{
    BuiltinTool, RetryPolicy, RetrySpec, ToolEffects, ToolSetting, ValidationError,
};
use toolserver_store::ToolRecord;

/// Where a config whose registry is built comes from. A config being saved
/// is refused for a setting that does not hold (effects wider than the
/// tool's, the deprecated `safeToRepeat: true` on a tool whose effects do
/// not allow repeats); a stored one keeps loading, the setting giving way
/// to the tool's own effects with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// A config about to be saved.
    Saving,
    /// A config that was saved before (a turn about to run).
    Stored,
}

/// What a tool's calls do, as registered.
pub(super) struct Conduct {
    pub(super) effects: ToolEffects,
    pub(super) retry: RetryPolicy,
    pub(super) open_world: bool,
}

/// What a tool says of its calls before an agent config narrows it.
pub(super) struct Declared {
    pub(super) effects: ToolEffects,
    retry: RetrySpec,
    open_world: bool,
}

impl Declared {
    /// A built-in's fixed effects; each reaches beyond the server (Tavily's
    /// API, the people a handoff goes to).
    pub(super) fn builtin(tool: BuiltinTool) -> Self {
        Self {
            effects: tool.effects(),
            retry: RetrySpec::default(),
            open_world: true,
        }
    }

    /// An uploaded tool's manifest; its code reaches the network unless its
    /// egress allow list is empty.
    pub(super) fn uploaded(record: &ToolRecord) -> Self {
        Self {
            effects: record.effects,
            retry: record.retry,
            open_world: record
                .egress_allow
                .as_ref()
                .is_none_or(|allow| !allow.patterns().is_empty()),
        }
    }

    /// A remote MCP tool's annotations: `readOnlyHint` is `read`;
    /// `idempotentHint` on a tool that says it is not destructive is
    /// `idempotent`; anything else is `side_effect` (MCP's defaults: not
    /// read-only, destructive, not idempotent, open world).
    pub(super) fn remote(tool: &Tool) -> Self {
        let hints = tool.annotations.as_ref();
        let hint = |pick: fn(&rmcp::model::ToolAnnotations) -> Option<bool>| hints.and_then(pick);
        let effects = if hint(|h| h.read_only_hint) == Some(true) {
            ToolEffects::Read
        } else if hint(|h| h.idempotent_hint) == Some(true)
            && hint(|h| h.destructive_hint) == Some(false)
        {
            ToolEffects::Idempotent
        } else {
            ToolEffects::SideEffect
        };
        Self {
            effects,
            retry: RetrySpec::default(),
            open_world: hint(|h| h.open_world_hint).unwrap_or(true),
        }
    }

    /// An MCP server's connect tool: asking again changes nothing once
    /// the user is connected; it reaches the provider.
    pub(super) fn connect() -> Self {
        Self {
            effects: ToolEffects::Idempotent,
            retry: RetrySpec::default(),
            open_world: true,
        }
    }

    /// The calls as declared.
    pub(super) fn as_declared(&self) -> Conduct {
        self.narrowed_to(self.effects)
    }

    /// The calls with `effects` in force (at least as cautious as declared).
    pub(super) fn narrowed_to(&self, effects: ToolEffects) -> Conduct {
        Conduct {
            effects,
            retry: self.retry.policy(effects),
            open_world: self.open_world,
        }
    }
}

/// The effects in force for the tool configured at `field` whose own are
/// `declared`: narrowed by the setting's `effects`, never widened; the
/// deprecated `safeToRepeat: true` must agree with them. What a stored
/// config gets wrong is returned as warnings instead of refused.
pub(super) fn settle(
    field: &str,
    setting: &ToolSetting,
    declared: ToolEffects,
    source: ConfigSource,
) -> Result<(ToolEffects, Vec<String>), ValidationError> {
    let mut warnings = Vec::new();
    let effects = match setting.effects {
        None => declared,
        Some(narrowed) => match narrowed.narrowing(declared, &format!("{field}.effects")) {
            Ok(effects) => effects,
            Err(refused) if source == ConfigSource::Saving => return Err(refused),
            Err(ignored) => {
                warnings.push(format!(
                    "{}: {}; the tool's own effects ({declared}) are in force",
                    ignored.field, ignored.message
                ));
                declared
            }
        },
    };
    if setting.claims_safe_to_repeat && !effects.allows_repeat() {
        let reason = format!(
            "a detached call is launched again only when its tool's effects are read or \
             idempotent, and this tool's are {declared} (an uploaded tool declares them as \
             `effects` in its manifest)"
        );
        let field = format!("{field}.safeToRepeat");
        match source {
            ConfigSource::Saving => {
                return Err(ValidationError::new(
                    field,
                    format!("is deprecated and does not hold: {reason}"),
                ))
            }
            ConfigSource::Stored => warnings.push(format!("{field} is ignored: {reason}")),
        }
    }
    Ok((effects, warnings))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::{JsonObject, Tool, ToolAnnotations};
    use toolserver_domain::ToolEffects::{self, *};
    use toolserver_domain::ToolSetting;

    use super::{settle, ConfigSource, Declared};

    fn annotated(
        read_only: Option<bool>,
        destructive: Option<bool>,
        idempotent: Option<bool>,
    ) -> Tool {
        Tool::new("t", "a tool", Arc::new(JsonObject::new())).with_annotations(
            ToolAnnotations::from_raw(None, read_only, destructive, idempotent, None),
        )
    }

    #[test]
    fn a_remote_tool_takes_its_effects_from_its_annotations() {
        let bare = Tool::new("t", "a tool", Arc::new(JsonObject::new()));
        assert_eq!(Declared::remote(&bare).effects, SideEffect);
        assert!(Declared::remote(&bare).open_world);
        for (read_only, destructive, idempotent, effects) in [
            (Some(true), None, None, Read),
            (Some(true), Some(true), Some(false), Read),
            (None, Some(false), Some(true), Idempotent),
            (Some(false), Some(false), Some(true), Idempotent),
            (None, None, Some(true), SideEffect),
            (None, Some(true), Some(true), SideEffect),
            (None, Some(false), None, SideEffect),
            (None, None, None, SideEffect),
        ] {
            let tool = annotated(read_only, destructive, idempotent);
            assert_eq!(
                Declared::remote(&tool).effects,
                effects,
                "{read_only:?} {destructive:?} {idempotent:?}"
            );
        }
    }

    #[test]
    fn a_stored_config_gives_way_where_a_saved_one_is_refused() {
        let setting = |effects: Option<ToolEffects>, claims: bool| ToolSetting {
            effects,
            claims_safe_to_repeat: claims,
            ..ToolSetting::default()
        };
        let wider = setting(Some(Read), false);
        let err = settle("f", &wider, Idempotent, ConfigSource::Saving).unwrap_err();
        assert_eq!(err.field, "f.effects");
        let (effects, warnings) = settle("f", &wider, Idempotent, ConfigSource::Stored).unwrap();
        assert_eq!((effects, warnings.len()), (Idempotent, 1));

        let claim = setting(None, true);
        let err = settle("f", &claim, SideEffect, ConfigSource::Saving).unwrap_err();
        assert_eq!(err.field, "f.safeToRepeat");
        let (effects, warnings) = settle("f", &claim, SideEffect, ConfigSource::Stored).unwrap();
        assert_eq!((effects, warnings.len()), (SideEffect, 1));
        assert_eq!(
            settle("f", &claim, Idempotent, ConfigSource::Saving).unwrap(),
            (Idempotent, Vec::new())
        );
        assert_eq!(
            settle(
                "f",
                &setting(Some(SideEffect), false),
                Read,
                ConfigSource::Saving
            )
            .unwrap(),
            (SideEffect, Vec::new())
        );
    }
}
