//! Every rendered object reads back as its Kubernetes API type, once, in
//! the namespace its scope calls for.

use std::collections::BTreeSet;

use crate::{describe, rendered, validate, ALL};

#[test]
fn every_rendered_object_reads_back_as_its_kubernetes_type() {
    let mut problems = Vec::new();
    for overlay in ALL {
        let objects = rendered(overlay);
        let mut seen = BTreeSet::new();
        for object in &objects {
            let what = describe(object);
            let key = (
                object["apiVersion"].to_string(),
                object["kind"].to_string(),
                object["metadata"]["namespace"].to_string(),
                object["metadata"]["name"].to_string(),
            );
            if !seen.insert(key) {
                problems.push(format!("{overlay}: {what} is rendered twice"));
            }
            match validate(object) {
                Ok(namespaced) => {
                    let namespace = object["metadata"]["namespace"].as_str();
                    if namespaced && namespace.is_none_or(str::is_empty) {
                        problems.push(format!("{overlay}: {what} names no namespace"));
                    }
                    if !namespaced && namespace.is_some() {
                        problems.push(format!(
                            "{overlay}: {what} is cluster-scoped but names a namespace"
                        ));
                    }
                }
                Err(problem) => problems.push(format!("{overlay}: {what} {problem}")),
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
