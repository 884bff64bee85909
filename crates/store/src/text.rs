//! Text that Postgres can store. A `text` column cannot hold U+0000, so
//! text that comes from tools or models (never refused: it is output, not
//! input) has each NUL written as the visible escape `\u0000` instead.

use std::borrow::Cow;

/// `raw` with every NUL replaced by the six characters `\u0000`.
pub fn storable(raw: &str) -> Cow<'_, str> {
    if raw.contains('\0') {
        Cow::Owned(raw.replace('\0', "\\u0000"))
    } else {
        Cow::Borrowed(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_becomes_a_visible_escape() {
        assert_eq!(storable("a\0b"), "a\\u0000b");
        assert!(matches!(storable("plain"), Cow::Borrowed("plain")));
    }
}
