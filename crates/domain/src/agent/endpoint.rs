//! The grammar every endpoint an agent config names follows (model base
//! URLs, MCP server URLs), and the parse that holds a URL to it.

use url::Url;

/// The grammar of an endpoint a config names, as a regex: http(s), a host
/// name whose last label starts with a letter (so it never reads as an IPv4
/// number) or a dotted IPv4 address, an optional port and path, then
/// `$tail`; no user info or fragment.
macro_rules! endpoint_pattern {
    ($tail:literal) => {
        concat!(
            r"^https?://(?:(?:[A-Za-z0-9-]+\.)*[A-Za-z][A-Za-z0-9-]*",
            r"|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?",
            r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?",
            $tail,
            "$",
        )
    };
}
pub(crate) use endpoint_pattern;

/// `raw` as a URL when it matches an endpoint's `grammar`.
pub(crate) fn parse_endpoint(raw: &str, grammar: Option<&regex::Regex>) -> Option<Url> {
    grammar
        .filter(|grammar| grammar.is_match(raw))
        .and_then(|_| Url::parse(raw).ok())
}
