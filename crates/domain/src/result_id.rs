//! The id of a detached call's result row (`async_tool_results`): the
//! `statusId` of `async_status`, the `resultId` of a runner's completion and
//! heartbeat routes, an MCP task's `taskId`. A UUIDv7, shown as a plain
//! hyphenated UUID.

use std::fmt;

use uuid::Uuid;

/// Why a presented result id was refused: it is not a UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a result id")]
pub struct ResultIdError;

/// A result id, made only by minting ([`ResultId::generate`]), by parsing
/// the wire form ([`ResultId::parse`]) or by reading it back from storage
/// (its uuid column, with the `sqlx` feature). Its `Debug` is the UUID's,
/// so logs and spans show it as they show a bare UUID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
pub struct ResultId(Uuid);

impl ResultId {
    /// A new, time-ordered id (UUIDv7).
    pub fn generate() -> Self {
        Self(Uuid::now_v7())
    }

    /// Parses the wire form: any spelling of a UUID (hyphenated, simple,
    /// braced or URN, in either case).
    pub fn parse(raw: &str) -> Result<Self, ResultIdError> {
        Uuid::try_parse(raw).map(Self).map_err(|_| ResultIdError)
    }
}

impl fmt::Display for ResultId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for ResultId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_parses_back_from_what_it_shows() {
        let id = ResultId::generate();
        let shown = id.to_string();
        assert_eq!(shown.len(), 36);
        assert_eq!(ResultId::parse(&shown), Ok(id));
        assert_eq!(ResultId::parse(&shown).unwrap().to_string(), shown);
        assert_eq!(format!("{id:?}"), format!("{:?}", id.0));
    }

    #[test]
    fn every_spelling_of_a_uuid_is_the_same_id() {
        let id = ResultId::generate();
        let uuid = id.0;
        let spellings = [
            uuid.simple().to_string(),
            uuid.braced().to_string(),
            uuid.urn().to_string(),
            uuid.hyphenated().to_string().to_uppercase(),
        ];
        for spelling in spellings {
            assert_eq!(ResultId::parse(&spelling), Ok(id), "{spelling}");
        }
    }

    #[test]
    fn a_malformed_id_is_refused() {
        let id = ResultId::generate().to_string();
        let bad = [
            String::new(),
            "not-a-uuid".to_owned(),
            format!("res_{}", id.replace('-', "")),
            id[..35].to_owned(),
            format!("{id}0"),
            format!(" {id}"),
            id.replacen(|c: char| c.is_ascii_hexdigit(), "g", 1),
        ];
        for raw in bad {
            assert_eq!(ResultId::parse(&raw), Err(ResultIdError), "{raw:?}");
        }
    }
}
