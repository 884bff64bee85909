//! What calling a tool does to the world (`effects`) and how its transient
//! failures may be retried (`retry`). A tool's manifest declares both; an
//! agent config may narrow the effects (declare them more cautious), never
//! widen them. Only `read` and `idempotent` tools may run a call twice.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::validation::whole_u64;
use crate::ValidationError;

/// What a call does, from the least cautious to the most (the order is
/// [`Ord`]'s: `Read < Idempotent < SideEffect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ToolEffects {
    /// Reads only: calling it any number of times changes nothing.
    Read,
    /// Changes something, but calling it again with the same input changes
    /// nothing more.
    Idempotent,
    /// Anything else: each call may change something anew. The default.
    #[default]
    SideEffect,
}

impl ToolEffects {
    /// Every value, least cautious first.
    pub const ALL: [Self; 3] = [Self::Read, Self::Idempotent, Self::SideEffect];

    /// Parses the wire spelling (`read`, `idempotent`, `side_effect`),
    /// naming `field` when it is none of them.
    pub fn parse(field: &str, raw: &str) -> Result<Self, ValidationError> {
        Self::ALL
            .into_iter()
            .find(|effects| effects.as_str() == raw)
            .ok_or_else(|| {
                ValidationError::new(field, "must be one of read, idempotent, side_effect")
            })
    }

    /// [`Self::parse`] for a JSON value, which must be one of the strings.
    pub fn parse_value(field: &str, value: &Value) -> Result<Self, ValidationError> {
        Self::parse(field, value.as_str().unwrap_or_default())
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Idempotent => "idempotent",
            Self::SideEffect => "side_effect",
        }
    }

    /// Whether a call may run again after it was started: a detached call
    /// whose runner died is launched again, a failed call retried.
    pub fn allows_repeat(self) -> bool {
        self != Self::SideEffect
    }

    /// These effects as an agent config declares them over a tool whose
    /// manifest declares `declared`: the same or more cautious, else an
    /// error naming `field`.
    pub fn narrowing(self, declared: Self, field: &str) -> Result<Self, ValidationError> {
        if self >= declared {
            return Ok(self);
        }
        Err(ValidationError::new(
            field,
            format!(
                "may narrow the tool's effects, never widen them: the tool declares {declared}, \
                 and {self} is less cautious (read < idempotent < side_effect)"
            ),
        ))
    }
}

impl fmt::Display for ToolEffects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a call that failed for a transient reason may be tried again: the
/// plain numbers a retrying caller reads. `max_attempts` counts the first
/// try, so 1 means never again; the wait before try `n + 1` starts at
/// `initial_backoff` and grows up to `max_backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Most tries of one call, the first included (1 to 10; always 1 for a
    /// `side_effect` tool).
    pub max_attempts: u32,
    /// The wait before the second try.
    pub initial_backoff: Duration,
    /// The longest wait between two tries (never below `initial_backoff`).
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// The policy of a tool with `effects` that declares no `retry`.
    pub fn default_for(effects: ToolEffects) -> Self {
        RetrySpec::default().policy(effects)
    }
}

/// A manifest's `retry` as declared; each field left out takes its
/// default for the tool's effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetrySpec {
    max_attempts: Option<u32>,
    initial_backoff_ms: Option<u32>,
    max_backoff_ms: Option<u32>,
}

impl RetrySpec {
    /// Bounds of `maxAttempts`.
    pub const MAX_ATTEMPTS: std::ops::RangeInclusive<u32> = 1..=10;
    /// Bounds of `initialBackoffMs`.
    pub const INITIAL_BACKOFF_MS: std::ops::RangeInclusive<u32> = 1..=60_000;
    /// Bounds of `maxBackoffMs`.
    pub const MAX_BACKOFF_MS: std::ops::RangeInclusive<u32> = 1..=300_000;
    /// Tries of a `read` or `idempotent` tool that declares none.
    pub const DEFAULT_REPEATABLE_ATTEMPTS: u32 = 3;
    /// `initialBackoffMs` when none is declared.
    pub const DEFAULT_INITIAL_BACKOFF_MS: u32 = 250;
    /// `maxBackoffMs` when none is declared. The longest wait is never
    /// below the first: an `initialBackoffMs` above it raises it.
    pub const DEFAULT_MAX_BACKOFF_MS: u32 = 5_000;

    /// Parses `retry`: an object of `maxAttempts`, `initialBackoffMs` and
    /// `maxBackoffMs`, each optional and within its bounds. A refusal names
    /// the field (`retry.maxAttempts`, …).
    pub fn parse(value: &Value) -> Result<Self, ValidationError> {
        const FIELD: &str = "retry";
        let Some(object) = value.as_object() else {
            return Err(ValidationError::new(FIELD, "must be an object"));
        };
        if let Some(unknown) = object.keys().find(|key| {
            !["maxAttempts", "initialBackoffMs", "maxBackoffMs"].contains(&key.as_str())
        }) {
            return Err(ValidationError::new(
                format!("{FIELD}.{unknown}"),
                "is not a field of retry (maxAttempts, initialBackoffMs, maxBackoffMs)",
            ));
        }
        let bounded = |name: &str, bounds: std::ops::RangeInclusive<u32>| match object.get(name) {
            None => Ok(None),
            Some(value) => whole_u64(value)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| bounds.contains(n))
                .map(Some)
                .ok_or_else(|| {
                    ValidationError::new(
                        format!("{FIELD}.{name}"),
                        format!(
                            "must be an integer from {} to {}",
                            bounds.start(),
                            bounds.end()
                        ),
                    )
                }),
        };
        Ok(Self {
            max_attempts: bounded("maxAttempts", Self::MAX_ATTEMPTS)?,
            initial_backoff_ms: bounded("initialBackoffMs", Self::INITIAL_BACKOFF_MS)?,
            max_backoff_ms: bounded("maxBackoffMs", Self::MAX_BACKOFF_MS)?,
        })
    }

    /// Rebuilds a spec stored after [`Self::parse`] accepted it; a stored
    /// number out of its bounds is dropped for the default.
    pub fn from_stored(
        max_attempts: Option<i32>,
        initial_backoff_ms: Option<i32>,
        max_backoff_ms: Option<i32>,
    ) -> Self {
        let within = |n: Option<i32>, bounds: std::ops::RangeInclusive<u32>| {
            n.and_then(|n| u32::try_from(n).ok())
                .filter(|n| bounds.contains(n))
        };
        Self {
            max_attempts: within(max_attempts, Self::MAX_ATTEMPTS),
            initial_backoff_ms: within(initial_backoff_ms, Self::INITIAL_BACKOFF_MS),
            max_backoff_ms: within(max_backoff_ms, Self::MAX_BACKOFF_MS),
        }
    }

    /// The declared `maxAttempts`, if any.
    pub fn max_attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The declared `initialBackoffMs`, if any.
    pub fn initial_backoff_ms(&self) -> Option<u32> {
        self.initial_backoff_ms
    }

    /// The declared `maxBackoffMs`, if any.
    pub fn max_backoff_ms(&self) -> Option<u32> {
        self.max_backoff_ms
    }

    /// Refuses a spec that a tool with `effects` may not declare: a
    /// `side_effect` tool runs a call once, so its `maxAttempts` is 1.
    pub fn check_for(&self, effects: ToolEffects) -> Result<(), ValidationError> {
        match self.max_attempts {
            Some(attempts) if attempts > 1 && !effects.allows_repeat() => {
                Err(ValidationError::new(
                    "retry.maxAttempts",
                    format!(
                        "is {attempts}, but a tool whose effects are side_effect runs a call once: \
                         declare maxAttempts 1, or effects read or idempotent"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The policy in force for a tool with `effects`: the declared fields,
    /// defaults for the rest; a `side_effect` tool always has one attempt,
    /// and the longest wait is at least the first.
    pub fn policy(&self, effects: ToolEffects) -> RetryPolicy {
        let max_attempts = match effects.allows_repeat() {
            true => self
                .max_attempts
                .unwrap_or(Self::DEFAULT_REPEATABLE_ATTEMPTS),
            false => 1,
        };
        let initial = self
            .initial_backoff_ms
            .unwrap_or(Self::DEFAULT_INITIAL_BACKOFF_MS);
        let max = self
            .max_backoff_ms
            .unwrap_or(Self::DEFAULT_MAX_BACKOFF_MS)
            .max(initial);
        RetryPolicy {
            max_attempts,
            initial_backoff: Duration::from_millis(u64::from(initial)),
            max_backoff: Duration::from_millis(u64::from(max)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn effects_parse_their_wire_spelling_and_order_by_caution() {
        for effects in ToolEffects::ALL {
            assert_eq!(ToolEffects::parse("effects", effects.as_str()), Ok(effects));
        }
        for bad in ["", "Read", "write", "side-effect"] {
            assert_eq!(
                ToolEffects::parse("effects", bad).unwrap_err().field,
                "effects"
            );
        }
        assert_eq!(
            ToolEffects::parse_value("x.effects", &json!(1))
                .unwrap_err()
                .field,
            "x.effects"
        );
        assert!(ToolEffects::Read < ToolEffects::Idempotent);
        assert!(ToolEffects::Idempotent < ToolEffects::SideEffect);
        assert_eq!(ToolEffects::default(), ToolEffects::SideEffect);
        assert!(ToolEffects::Read.allows_repeat() && ToolEffects::Idempotent.allows_repeat());
        assert!(!ToolEffects::SideEffect.allows_repeat());
    }

    #[test]
    fn narrowing_may_add_caution_never_remove_it() {
        use ToolEffects::*;
        for (declared, asked, ok) in [
            (Read, Read, true),
            (Read, SideEffect, true),
            (Idempotent, SideEffect, true),
            (Idempotent, Read, false),
            (SideEffect, Idempotent, false),
            (SideEffect, Read, false),
        ] {
            let narrowed = asked.narrowing(declared, "f");
            assert_eq!(narrowed.is_ok(), ok, "{declared} -> {asked}");
            if let Err(err) = narrowed {
                assert_eq!(err.field, "f");
                assert!(err.message.contains(declared.as_str()), "{}", err.message);
            }
        }
    }

    #[test]
    fn retry_fields_are_bounded_and_named() {
        let spec = RetrySpec::parse(
            &json!({"maxAttempts": 5, "initialBackoffMs": 100, "maxBackoffMs": 2000}),
        )
        .unwrap();
        assert_eq!(
            spec.policy(ToolEffects::Read),
            RetryPolicy {
                max_attempts: 5,
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(2000),
            }
        );
        for (bad, field) in [
            (json!([]), "retry"),
            (json!({"maxAttempts": 0}), "retry.maxAttempts"),
            (json!({"maxAttempts": 11}), "retry.maxAttempts"),
            (json!({"maxAttempts": 2.5}), "retry.maxAttempts"),
            (json!({"initialBackoffMs": 0}), "retry.initialBackoffMs"),
            (json!({"maxBackoffMs": 300_001}), "retry.maxBackoffMs"),
            (json!({"attempts": 2}), "retry.attempts"),
        ] {
            assert_eq!(RetrySpec::parse(&bad).unwrap_err().field, field, "{bad}");
        }
    }

    #[test]
    fn defaults_follow_the_effects_and_side_effects_run_once() {
        assert_eq!(RetryPolicy::default_for(ToolEffects::Read).max_attempts, 3);
        assert_eq!(
            RetryPolicy::default_for(ToolEffects::Idempotent).max_attempts,
            3
        );
        assert_eq!(
            RetryPolicy::default_for(ToolEffects::SideEffect).max_attempts,
            1
        );
        let three = RetrySpec::parse(&json!({"maxAttempts": 3})).unwrap();
        assert!(three.check_for(ToolEffects::Idempotent).is_ok());
        let refused = three.check_for(ToolEffects::SideEffect).unwrap_err();
        assert_eq!(refused.field, "retry.maxAttempts");
        assert_eq!(three.policy(ToolEffects::SideEffect).max_attempts, 1);
        let once = RetrySpec::parse(&json!({"maxAttempts": 1})).unwrap();
        assert!(once.check_for(ToolEffects::SideEffect).is_ok());
        for long_start in [
            json!({"initialBackoffMs": 9000}),
            json!({"initialBackoffMs": 9000, "maxBackoffMs": 100}),
        ] {
            let policy = RetrySpec::parse(&long_start)
                .unwrap()
                .policy(ToolEffects::Read);
            assert_eq!(
                policy.max_backoff,
                Duration::from_millis(9000),
                "{long_start}"
            );
        }
    }

    #[test]
    fn stored_specs_round_trip() {
        let spec = RetrySpec::parse(&json!({"maxAttempts": 4, "maxBackoffMs": 800})).unwrap();
        let stored = RetrySpec::from_stored(
            spec.max_attempts().map(|n| n as i32),
            spec.initial_backoff_ms().map(|n| n as i32),
            spec.max_backoff_ms().map(|n| n as i32),
        );
        assert_eq!(stored, spec);
    }
}
