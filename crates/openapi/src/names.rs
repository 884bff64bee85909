//! Names: tool names (valid, at most 64 characters, unique within an import)
//! and input property names (unique within a tool, URI-template-safe for
//! path parameters).

use std::collections::HashSet;

use sha2::{Digest, Sha256};

/// Longest tool name the server accepts.
const MAX_NAME: usize = 64;
/// Hex characters of the hash appended to shortened or disambiguated names.
const HASH_CHARS: usize = 8;

/// Assigns tool names for one import.
#[derive(Debug)]
pub(crate) struct ToolNames {
    namespace: Option<String>,
    used: HashSet<String>,
}

impl ToolNames {
    /// Names prefixed by `namespace` (already validated), when given.
    pub(crate) fn new(namespace: Option<&str>) -> Self {
        Self {
            namespace: namespace.map(str::to_owned),
            used: HashSet::new(),
        }
    }

    /// A name for an operation, from its `operationId` or else its method and
    /// path, not given out before in this import.
    pub(crate) fn assign(
        &mut self,
        operation_id: Option<&str>,
        method: &str,
        path: &str,
    ) -> String {
        let base = match operation_id.filter(|id| !id.is_empty()) {
            Some(id) => sanitize(id),
            None => from_method_and_path(method, path),
        };
        let full = match &self.namespace {
            Some(namespace) => format!("{namespace}_{base}"),
            None => base,
        };
        let mut name = if full.len() > MAX_NAME {
            with_hash(&full, &full)
        } else {
            full.clone()
        };
        let mut attempt = 0u32;
        while self.used.contains(&name) {
            attempt += 1;
            name = with_hash(&full, &format!("{method} {path} {attempt}"));
        }
        self.used.insert(name.clone());
        name
    }
}

/// `name` cut so that `_` and a hash of `seed` fit after it within 64 characters.
fn with_hash(name: &str, seed: &str) -> String {
    let digest = hex::encode(Sha256::digest(seed.as_bytes()));
    let keep = name.len().min(MAX_NAME - HASH_CHARS - 1);
    format!("{}_{}", &name[..keep], &digest[..HASH_CHARS])
}

/// `raw` with every character outside `[A-Za-z0-9_-]` replaced by `_`.
fn sanitize(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `get_pets_petId` for `GET /pets/{petId}`.
fn from_method_and_path(method: &str, path: &str) -> String {
    let mut name = method.to_ascii_lowercase();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        let cleaned = sanitize(&segment.replace(['{', '}'], ""));
        let cleaned = cleaned.trim_matches('_');
        if !cleaned.is_empty() {
            name.push('_');
            name.push_str(cleaned);
        }
    }
    name
}

/// Whether `name` is an RFC 6570 varname without pct-encoding: word
/// characters, with single dots between them.
pub(crate) fn is_varname(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|part| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// Hands out input property names, each at most once.
#[derive(Debug, Default)]
pub(crate) struct PropertyNames(HashSet<String>);

impl PropertyNames {
    /// `wanted` (with `}` replaced, so `{{input.NAME}}` stays one
    /// placeholder), or with a numeric suffix when it is taken.
    pub(crate) fn claim(&mut self, wanted: &str) -> String {
        self.claim_with(&wanted.replace('}', "_"))
    }

    /// [`PropertyNames::claim`] for a URL template variable: kept when it is a
    /// valid varname, else its other characters become `_`.
    pub(crate) fn claim_varname(&mut self, wanted: &str) -> String {
        if is_varname(wanted) {
            return self.claim_with(wanted);
        }
        let cleaned: String = wanted
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        self.claim_with(&cleaned)
    }

    fn claim_with(&mut self, wanted: &str) -> String {
        let wanted = if wanted.is_empty() { "param" } else { wanted };
        let mut name = wanted.to_owned();
        let mut counter = 1;
        while self.0.contains(&name) {
            counter += 1;
            name = format!("{wanted}_{counter}");
        }
        self.0.insert(name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_operation_ids_or_method_and_path() {
        let mut names = ToolNames::new(None);
        assert_eq!(
            names.assign(Some("getPetById"), "get", "/pet/{petId}"),
            "getPetById"
        );
        assert_eq!(
            names.assign(Some("pets.list v2"), "get", "/pets"),
            "pets_list_v2"
        );
        assert_eq!(names.assign(None, "get", "/pets/{petId}"), "get_pets_petId");
        assert_eq!(names.assign(Some(""), "delete", "/"), "delete");
        let mut namespaced = ToolNames::new(Some("petstore"));
        assert_eq!(
            namespaced.assign(Some("addPet"), "post", "/pet"),
            "petstore_addPet"
        );
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash_and_stay_unique() {
        let long = "a".repeat(80);
        let mut names = ToolNames::new(Some("ns"));
        let first = names.assign(Some(&long), "get", "/a");
        let second = names.assign(Some(&long), "get", "/b");
        let third = names.assign(Some(&format!("{long}x")), "get", "/c");
        for name in [&first, &second, &third] {
            assert_eq!(name.len(), 64, "{name}");
            assert!(name.starts_with("ns_aaa"));
        }
        assert_ne!(first, second);
        assert_ne!(first, third);
        assert_eq!(
            ToolNames::new(Some("ns")).assign(Some(&long), "get", "/a"),
            first
        );

        let mut clashing = ToolNames::new(None);
        let a = clashing.assign(Some("get-board"), "get", "/board");
        let b = clashing.assign(Some("get-board"), "get", "/board2");
        assert_eq!(a, "get-board");
        assert!(b.starts_with("get-board_") && b.len() == 18, "{b}");
    }

    #[test]
    fn property_names_are_unique_and_varnames_valid() {
        let mut props = PropertyNames::default();
        assert_eq!(props.claim_varname("petId"), "petId");
        assert_eq!(props.claim_varname("pet.id"), "pet.id");
        assert_eq!(props.claim_varname("pet-id"), "pet_id");
        assert_eq!(props.claim_varname("pet_id"), "pet_id_2");
        assert_eq!(props.claim_varname(".x"), "_x");
        assert_eq!(props.claim("page-size"), "page-size");
        assert_eq!(props.claim("a}}"), "a__");
        assert_eq!(props.claim("petId"), "petId_2");
        assert!(!is_varname("a..b") && !is_varname("") && is_varname("a.b_c9"));
    }
}
