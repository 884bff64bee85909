//! A tool's egress allow list: the hosts its code may reach, narrowing the
//! default of "any public address".

use crate::ValidationError;

/// Host patterns a tool may connect to: `api.example.com` (that host) or
/// `*.example.com` (any host below it, not the domain itself). An empty
/// list allows nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressAllowList(Vec<String>);

impl EgressAllowList {
    /// Most patterns one list may hold.
    pub const MAX_ENTRIES: usize = 64;

    /// Parses patterns: DNS names of letters, digits and `-` (compared
    /// without case), each optionally led by `*.`, at most 253 characters
    /// in all; at most [`Self::MAX_ENTRIES`].
    pub fn parse(patterns: &[String]) -> Result<Self, ValidationError> {
        const FIELD: &str = "egress.allow";
        if patterns.len() > Self::MAX_ENTRIES {
            return Err(ValidationError::new(
                FIELD,
                format!(
                    "has {} entries; the limit is {}",
                    patterns.len(),
                    Self::MAX_ENTRIES
                ),
            ));
        }
        let mut parsed = Vec::with_capacity(patterns.len());
        for pattern in patterns {
            let name = pattern.strip_prefix("*.").unwrap_or(pattern);
            if pattern.len() > 253 || !is_dns_name(name) {
                return Err(ValidationError::new(
                    FIELD,
                    format!(
                        "{pattern:?} is not a host name or `*.` followed by one (letters, digits and '-' in dot-separated labels)"
                    ),
                ));
            }
            parsed.push(pattern.to_ascii_lowercase());
        }
        Ok(Self(parsed))
    }

    /// Whether `host` (a name or IP literal, any case, a trailing dot
    /// ignored) matches a pattern.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.0
            .iter()
            .any(|pattern| match pattern.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|below| below.len() > 1 && below.ends_with('.')),
                None => *pattern == host,
            })
    }

    /// The patterns, lower-cased.
    pub fn patterns(&self) -> &[String] {
        &self.0
    }
}

/// Whether `name` is dot-separated labels of 1-63 letters, digits or `-`
/// (not at either end).
fn is_dns_name(name: &str) -> bool {
    name.split('.').all(|label| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(patterns: &[&str]) -> EgressAllowList {
        let owned: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
        EgressAllowList::parse(&owned).unwrap()
    }

    #[test]
    fn exact_names_and_wildcards_below_a_domain_match() {
        let allow = list(&["API.example.com", "*.stripe.com"]);
        assert!(allow.allows("api.example.com"));
        assert!(allow.allows("Api.Example.COM."));
        assert!(!allow.allows("example.com"));
        assert!(!allow.allows("evil-api.example.com"));
        assert!(allow.allows("api.stripe.com"));
        assert!(allow.allows("a.b.stripe.com"));
        assert!(!allow.allows("stripe.com"));
        assert!(!allow.allows("notstripe.com"));
        assert!(!allow.allows("api.stripe.com.evil.net"));
        assert!(!EgressAllowList::default().allows("api.example.com"));
    }

    #[test]
    fn patterns_that_are_not_host_names_are_refused_naming_the_field() {
        for bad in [
            "",
            "*",
            "*.",
            "a..b",
            "-a.com",
            "a b.com",
            "http://a.com",
            "a.com:443",
            "**.a.com",
            "a.*.com",
        ] {
            let err = EgressAllowList::parse(&[bad.to_owned()]).unwrap_err();
            assert_eq!(err.field, "egress.allow", "{bad}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("h{i}.example.com")).collect();
        assert!(EgressAllowList::parse(&many).is_err());
    }
}
