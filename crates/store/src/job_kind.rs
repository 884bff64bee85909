//! What a detached turn's job runs.

/// What a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum JobKind {
    /// The turn's first pass.
    Start,
    /// A dispatch group's continuation.
    Continue,
    /// A detached call launched again (its runner died; it is safe to repeat).
    Relaunch,
}

impl JobKind {
    /// The column value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Continue => "continue",
            Self::Relaunch => "relaunch",
        }
    }
}
