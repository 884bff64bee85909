//! What a turn asks for: its async calls (which tool, how long each takes)
//! and the model's latency. The plan travels in the user message, so the
//! scripted model reads it back from any request of the turn.

use rand::Rng;

/// The kinds of async tools a turn calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Returns after 0-2 s.
    Quick,
    /// Throws after 0-2 s.
    Fail,
    /// Returns after 3-5 s.
    Slow,
    /// Heartbeats every 500 ms for 2-3 s, then returns.
    Beat,
}

impl ToolKind {
    /// Every kind, in a fixed order.
    pub const ALL: [Self; 4] = [Self::Quick, Self::Fail, Self::Slow, Self::Beat];

    /// The uploaded tool's name (what the model calls).
    pub fn tool_name(self) -> &'static str {
        match self {
            Self::Quick => "chaos_quick",
            Self::Fail => "chaos_fail",
            Self::Slow => "chaos_slow",
            Self::Beat => "chaos_beat",
        }
    }

    fn letter(self) -> char {
        match self {
            Self::Quick => 'q',
            Self::Fail => 'f',
            Self::Slow => 's',
            Self::Beat => 'h',
        }
    }

    fn from_letter(letter: char) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.letter() == letter)
    }

    /// Milliseconds a call of this kind takes, as a range.
    fn delay_ms(self) -> std::ops::RangeInclusive<u64> {
        match self {
            Self::Quick | Self::Fail => 0..=2000,
            Self::Slow => 3000..=5000,
            Self::Beat => 2000..=3000,
        }
    }

    fn random(rng: &mut impl Rng) -> Self {
        match rng.gen_range(0..10) {
            0..=3 => Self::Quick,
            4..=5 => Self::Fail,
            6..=7 => Self::Slow,
            _ => Self::Beat,
        }
    }
}

/// One async call of a turn's first pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallPlan {
    /// The tool call id the model gives it (unique in the run).
    pub id: String,
    /// Which tool.
    pub kind: ToolKind,
    /// How long the tool works before it answers (or throws).
    pub delay_ms: u64,
}

/// One detached turn: its marker, its calls and the model's latency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnPlan {
    /// `t<trial>x<turn>`: names the turn in texts and call ids.
    pub marker: String,
    /// Wait before the model's first chunk, on every pass of this turn.
    pub model_delay_ms: u64,
    /// The calls of the first pass (1 or more).
    pub calls: Vec<CallPlan>,
}

impl TurnPlan {
    /// A random turn `turn` of trial `trial` with 1..=`max_siblings` calls.
    pub fn random(rng: &mut impl Rng, trial: usize, turn: usize, max_siblings: usize) -> Self {
        let marker = format!("t{trial}x{turn}");
        let count = rng.gen_range(1..=max_siblings.max(1));
        let calls = (0..count)
            .map(|index| {
                let kind = ToolKind::random(rng);
                CallPlan {
                    id: format!("{marker}c{index}"),
                    kind,
                    delay_ms: rng.gen_range(kind.delay_ms()),
                }
            })
            .collect();
        Self {
            marker,
            model_delay_ms: rng.gen_range(0..=300),
            calls,
        }
    }

    /// The user message that starts the turn and carries its plan, e.g.
    /// `chaos turn t3x1 model 120 calls q1200,f30,s4100,h2500`.
    pub fn user_text(&self) -> String {
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|call| format!("{}{}", call.kind.letter(), call.delay_ms))
            .collect();
        format!(
            "chaos turn {} model {} calls {}",
            self.marker,
            self.model_delay_ms,
            calls.join(",")
        )
    }

    /// Reads a plan back from [`Self::user_text`].
    pub fn parse(text: &str) -> Option<Self> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let [_, _, marker, _, model, _, calls] = words.as_slice() else {
            return None;
        };
        if !text.starts_with("chaos turn ") {
            return None;
        }
        let calls = calls
            .split(',')
            .enumerate()
            .map(|(index, call)| {
                let mut chars = call.chars();
                let kind = ToolKind::from_letter(chars.next()?)?;
                Some(CallPlan {
                    id: format!("{marker}c{index}"),
                    kind,
                    delay_ms: chars.as_str().parse().ok()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            marker: (*marker).to_owned(),
            model_delay_ms: model.parse().ok()?,
            calls,
        })
    }

    /// Whether `call_id` names one of this turn's calls (`<marker>c<index>`).
    pub fn owns_call(&self, call_id: &str) -> bool {
        call_marker(call_id) == Some(self.marker.as_str())
    }

    /// What the model answers once the results arrived.
    pub fn final_text(&self) -> String {
        format!("done {}", self.marker)
    }

    /// What the model answers after the first pass (calls still pending).
    pub fn interim_text(&self) -> String {
        format!("started {}", self.marker)
    }
}

/// The marker of the turn whose call `call_id` is (`t3x1c4` is `t3x1`'s),
/// or `None` for an id the chaos model does not give.
pub fn call_marker(call_id: &str) -> Option<&str> {
    let (marker, index) = call_id.rsplit_once('c')?;
    let (trial, turn) = marker.strip_prefix('t')?.split_once('x')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    (digits(trial) && digits(turn) && digits(index)).then_some(marker)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn a_plan_survives_its_user_text() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for turn in 0..50 {
            let plan = TurnPlan::random(&mut rng, 3, turn, 20);
            assert!((1..=20).contains(&plan.calls.len()));
            assert_eq!(TurnPlan::parse(&plan.user_text()), Some(plan));
        }
    }

    #[test]
    fn a_call_id_names_its_turn() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let plan = TurnPlan::random(&mut rng, 12, 1, 5);
        for call in &plan.calls {
            assert_eq!(call_marker(&call.id), Some("t12x1"));
            assert!(plan.owns_call(&call.id));
        }
        for other in ["call_0190", "t12x1", "t12x1c", "tAx1c0", "t12x1c0x", "c3"] {
            assert_eq!(call_marker(other), None, "{other}");
        }
    }

    #[test]
    fn other_texts_are_not_plans() {
        assert_eq!(TurnPlan::parse("hello"), None);
        assert_eq!(TurnPlan::parse("chaos turn t1x0 model 5 calls z10"), None);
        assert_eq!(TurnPlan::parse("other turn t1x0 model 5 calls q10"), None);
    }
}
