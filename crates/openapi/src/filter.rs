//! The operation filter: which operations an import covers, and which
//! filter entries matched nothing.

/// Entries naming operations by `operationId` or as `METHOD /path`.
#[derive(Debug)]
pub(crate) struct Filter<'a> {
    entries: &'a [String],
    matched: Vec<bool>,
}

impl<'a> Filter<'a> {
    /// A filter over `entries`.
    pub(crate) fn new(entries: &'a [String]) -> Self {
        Self {
            entries,
            matched: vec![false; entries.len()],
        }
    }

    /// Whether an operation is selected, marking every entry that names it.
    pub(crate) fn selects(&mut self, method: &str, path: &str, operation_id: Option<&str>) -> bool {
        self.mark(|entry| {
            operation_id == Some(entry)
                || split(entry).is_some_and(|(m, p)| m.eq_ignore_ascii_case(method) && p == path)
        })
    }

    /// Whether any `METHOD /path` entry names `path`, marking those entries:
    /// for a path item that cannot be read, whose operations are unknown.
    pub(crate) fn selects_path(&mut self, path: &str) -> bool {
        self.mark(|entry| split(entry).is_some_and(|(_, p)| p == path))
    }

    /// The entries that matched no operation, in the order given.
    pub(crate) fn unmatched(&self) -> Vec<String> {
        self.entries
            .iter()
            .zip(&self.matched)
            .filter(|(_, matched)| !**matched)
            .map(|(entry, _)| entry.clone())
            .collect()
    }

    fn mark(&mut self, names: impl Fn(&str) -> bool) -> bool {
        let mut any = false;
        for (entry, matched) in self.entries.iter().zip(self.matched.iter_mut()) {
            if names(entry.trim()) {
                *matched = true;
                any = true;
            }
        }
        any
    }
}

fn split(entry: &str) -> Option<(&str, &str)> {
    let (method, path) = entry.split_once(' ')?;
    Some((method, path.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_by_operation_id_or_method_and_path() {
        let entries: Vec<String> = ["getPetById", "post /pet", "GET /nowhere", "addPet"]
            .map(String::from)
            .into();
        let mut filter = Filter::new(&entries);
        assert!(filter.selects("get", "/pet/{petId}", Some("getPetById")));
        assert!(filter.selects("post", "/pet", Some("addPet")));
        assert!(!filter.selects("put", "/pet", Some("updatePet")));
        assert!(!filter.selects("get", "/pet", None));
        assert_eq!(filter.unmatched(), vec!["GET /nowhere".to_owned()]);
    }
}
