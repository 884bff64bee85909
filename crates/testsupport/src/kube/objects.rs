//! Objects as JSON: create, get, list, merge-patch and delete, answering
//! errors with `metav1.Status` bodies like the real API server.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::answers::{bad_request, failure, not_found, now, unknown_resource};
use super::{pods, processes, Shared, Store};

/// A kind of object the fake cluster stores.
#[derive(Debug)]
struct Resource {
    api_version: &'static str,
    plural: &'static str,
    kind: &'static str,
}

const RESOURCES: &[Resource] = &[
    Resource {
        api_version: "v1",
        plural: "pods",
        kind: "Pod",
    },
    Resource {
        api_version: "v1",
        plural: "persistentvolumeclaims",
        kind: "PersistentVolumeClaim",
    },
    Resource {
        api_version: "networking.k8s.io/v1",
        plural: "networkpolicies",
        kind: "NetworkPolicy",
    },
];

/// What a request's path names.
struct Target {
    resource: &'static Resource,
    namespace: String,
    /// The collection's path, the key of its objects.
    collection: String,
    name: String,
}

impl Target {
    fn parse(params: &HashMap<String, String>) -> Option<Self> {
        let api_version = match (params.get("group"), params.get("version")) {
            (Some(group), Some(version)) => format!("{group}/{version}"),
            _ => "v1".to_owned(),
        };
        let plural = params.get("resource").map_or("", String::as_str);
        let resource = RESOURCES
            .iter()
            .find(|resource| resource.api_version == api_version && resource.plural == plural)?;
        let namespace = params.get("namespace").cloned().unwrap_or_default();
        let prefix = if api_version == "v1" {
            "/api/v1".to_owned()
        } else {
            format!("/apis/{api_version}")
        };
        Some(Self {
            resource,
            collection: format!("{prefix}/namespaces/{namespace}/{plural}"),
            namespace,
            name: params.get("name").cloned().unwrap_or_default(),
        })
    }

    fn not_found(&self) -> Response {
        not_found(self.resource.plural, &self.name)
    }

    fn conflict(&self, detail: &str) -> Response {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{}\": {detail}",
            self.resource.plural, self.name
        );
        let details = json!({"name": self.name, "kind": self.resource.plural});
        failure(StatusCode::CONFLICT, "Conflict", &message, details)
    }
}

/// Stamps a new object's server-set metadata.
pub(super) fn stamp(state: &mut Store, object: &mut Value, namespace: &str) {
    let revision = state.next_revision();
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let metadata = &mut object["metadata"];
    metadata["namespace"] = json!(namespace);
    metadata["resourceVersion"] = json!(revision);
    if !metadata["uid"].is_string() {
        metadata["uid"] = json!(uuid::Uuid::new_v4().to_string());
    }
    if !metadata["creationTimestamp"].is_string() {
        metadata["creationTimestamp"] = json!(now());
    }
}

/// `GET` of a collection, with equality label and field selectors.
pub(super) async fn list(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<HashMap<String, String>>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(target) = Target::parse(&params) else {
        return unknown_resource();
    };
    let mut labels = Vec::new();
    let mut fields = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let selectors = match key.as_ref() {
            "labelSelector" => &mut labels,
            "fieldSelector" => &mut fields,
            "watch" if value != "false" && value != "0" => {
                return bad_request("watch is not supported by the fake cluster");
            }
            _ => continue,
        };
        match Selector::parse(&value) {
            Ok(selector) => selectors.push(selector),
            Err(message) => return bad_request(&message),
        }
    }
    let state = shared.lock();
    let items: Vec<Value> = state
        .objects
        .get(&target.collection)
        .into_iter()
        .flat_map(|objects| objects.values())
        .filter(|object| {
            labels
                .iter()
                .all(|selector| selector.matches(|key| object["metadata"]["labels"][key].as_str()))
                && fields
                    .iter()
                    .all(|selector| selector.matches(|key| field(object, key)))
        })
        .cloned()
        .collect();
    Json(json!({
        "kind": format!("{}List", target.resource.kind),
        "apiVersion": target.resource.api_version,
        "metadata": {"resourceVersion": state.revision.to_string()},
        "items": items,
    }))
    .into_response()
}

/// The string at a dotted field path, e.g. `metadata.name`.
fn field<'a>(object: &'a Value, path: &str) -> Option<&'a str> {
    path.split('.')
        .try_fold(object, |value, key| value.get(key))?
        .as_str()
}

/// `POST` of a new object; a pod also starts running.
pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some(target) = Target::parse(&params) else {
        return unknown_resource();
    };
    let mut object = match serde_json::from_slice::<Value>(&body) {
        Ok(object @ Value::Object(_)) => object,
        _ => return bad_request("the body of the request must be a JSON object"),
    };
    let metadata = &object["metadata"];
    let name = match (metadata["name"].as_str(), metadata["generateName"].as_str()) {
        (Some(name), _) if !name.is_empty() => name.to_owned(),
        (_, Some(prefix)) => format!(
            "{prefix}{}",
            &uuid::Uuid::new_v4().simple().to_string()[..5]
        ),
        _ => {
            let message = format!(
                "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                target.resource.kind
            );
            return failure(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                &message,
                Value::Null,
            );
        }
    };
    let target = Target { name, ..target };
    let mut state = shared.lock();
    let exists = state
        .objects
        .get(&target.collection)
        .is_some_and(|objects| objects.contains_key(&target.name));
    if exists {
        let message = format!(
            "{} \"{}\" already exists",
            target.resource.plural, target.name
        );
        let details = json!({"name": target.name, "kind": target.resource.plural});
        return failure(StatusCode::CONFLICT, "AlreadyExists", &message, details);
    }
    object["kind"] = json!(target.resource.kind);
    object["apiVersion"] = json!(target.resource.api_version);
    stamp(&mut state, &mut object, &target.namespace);
    object["metadata"]["name"] = json!(target.name);
    match target.resource.plural {
        "pods" => {
            if let Err(error) = pods::start(
                &shared.options,
                &mut state,
                &target.namespace,
                &target.name,
                &mut object,
            ) {
                let message = format!("cannot prepare the pod's directories: {error}");
                return failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    &message,
                    Value::Null,
                );
            }
        }
        "persistentvolumeclaims" => object["status"] = json!({"phase": "Bound"}),
        _ => {}
    }
    state
        .objects
        .entry(target.collection)
        .or_default()
        .insert(target.name, object.clone());
    (StatusCode::CREATED, Json(object)).into_response()
}

/// `GET` of one object.
pub(super) async fn read(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<HashMap<String, String>>,
) -> Response {
    let Some(target) = Target::parse(&params) else {
        return unknown_resource();
    };
    let state = shared.lock();
    match state
        .objects
        .get(&target.collection)
        .and_then(|objects| objects.get(&target.name))
    {
        Some(object) => Json(object).into_response(),
        None => target.not_found(),
    }
}

/// `DELETE` of one object, honouring `preconditions`; a pod's processes are
/// dead by the time it answers.
pub(super) async fn remove(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some(target) = Target::parse(&params) else {
        return unknown_resource();
    };
    let options = serde_json::from_slice::<Value>(&body).unwrap_or_default();
    let (object, dir) = {
        let mut state = shared.lock();
        let Some(objects) = state.objects.get_mut(&target.collection) else {
            return target.not_found();
        };
        let Some(object) = objects.get(&target.name).cloned() else {
            return target.not_found();
        };
        let preconditions = &options["preconditions"];
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            let (Some(expected), actual) = (
                preconditions[field].as_str(),
                object["metadata"][field].as_str().unwrap_or_default(),
            ) else {
                continue;
            };
            if expected != actual {
                let detail = format!(
                    "Precondition failed: {label} in precondition: {expected}, {label} in object meta: {actual}"
                );
                return target.conflict(&detail);
            }
        }
        objects.remove(&target.name);
        let key = (target.namespace.clone(), target.name.clone());
        let dir = match target.resource.plural {
            "pods" => state.pods.remove(&key).map(|mut runtime| runtime.stop()),
            _ => None,
        };
        (object, dir)
    };
    if let Some(dir) = dir {
        let _ = tokio::task::spawn_blocking(move || processes::kill_all_in(&dir)).await;
    }
    Json(object).into_response()
}

/// `PATCH` of one object with a JSON merge patch (a strategic merge patch is
/// taken as one); a `metadata.resourceVersion` in the patch must match.
pub(super) async fn patch(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(target) = Target::parse(&params) else {
        return unknown_resource();
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    if !matches!(
        media_type,
        "application/merge-patch+json" | "application/strategic-merge-patch+json"
    ) {
        let message = format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/merge-patch+json, application/strategic-merge-patch+json (got {content_type:?})"
        );
        return failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &message,
            Value::Null,
        );
    }
    let Ok(patch @ Value::Object(_)) = serde_json::from_slice::<Value>(&body) else {
        return bad_request("the body of the request must be a JSON object");
    };
    let mut state = shared.lock();
    let revision = state.next_revision();
    let Some(object) = state
        .objects
        .get_mut(&target.collection)
        .and_then(|objects| objects.get_mut(&target.name))
    else {
        return target.not_found();
    };
    if let Some(expected) = patch["metadata"]["resourceVersion"].as_str() {
        if Some(expected) != object["metadata"]["resourceVersion"].as_str() {
            return target.conflict(
                "the object has been modified; please apply your changes to the latest version and try again",
            );
        }
    }
    let identity = ["name", "namespace", "uid", "creationTimestamp"]
        .map(|key| (key, object["metadata"][key].clone()));
    merge(object, &patch);
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    for (key, value) in identity {
        object["metadata"][key] = value;
    }
    object["metadata"]["resourceVersion"] = json!(revision);
    Json(object.clone()).into_response()
}

/// Applies an RFC 7386 JSON merge patch.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// One requirement of an equality-based selector.
#[derive(Debug, PartialEq)]
struct Requirement {
    key: String,
    value: String,
    equal: bool,
}

/// An equality-based selector: `a=b,c==d,e!=f`.
#[derive(Debug, PartialEq)]
struct Selector(Vec<Requirement>);

impl Selector {
    fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
        {
            let (key, value, equal) = if let Some((key, value)) = part.split_once("!=") {
                (key, value, false)
            } else if let Some((key, value)) = part.split_once("==") {
                (key, value, true)
            } else if let Some((key, value)) = part.split_once('=') {
                (key, value, true)
            } else {
                return Err(format!(
                    "unable to parse requirement: {part:?}: only equality selectors are supported"
                ));
            };
            if key.trim().is_empty() {
                return Err(format!("unable to parse requirement: {part:?}: empty key"));
            }
            requirements.push(Requirement {
                key: key.trim().to_owned(),
                value: value.trim().to_owned(),
                equal,
            });
        }
        Ok(Self(requirements))
    }

    fn matches<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|requirement| {
            (lookup(&requirement.key) == Some(requirement.value.as_str())) == requirement.equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge(
            &mut target,
            &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"m": 1}}),
        );
        assert_eq!(
            target,
            json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"m": 1}})
        );
        merge(&mut target, &json!(["whole"]));
        assert_eq!(target, json!(["whole"]));
    }

    #[test]
    fn selectors_match_by_equality() {
        let selector = Selector::parse("app=worker, tier==a,zone!=b").expect("a selector");
        let labels = json!({"app": "worker", "tier": "a"});
        assert!(selector.matches(|key| labels[key].as_str()));
        let labels = json!({"app": "worker", "tier": "a", "zone": "b"});
        assert!(!selector.matches(|key| labels[key].as_str()));
        let labels = json!({"app": "worker"});
        assert!(!selector.matches(|key| labels[key].as_str()));
        assert_eq!(Selector::parse(""), Ok(Selector(Vec::new())));
        assert!(Selector::parse("app in (a,b)").is_err());
        assert!(Selector::parse("=a").is_err());
    }

    #[test]
    fn fields_follow_dotted_paths() {
        let object = json!({"metadata": {"name": "x"}, "status": {"phase": "Running"}});
        assert_eq!(field(&object, "metadata.name"), Some("x"));
        assert_eq!(field(&object, "status.phase"), Some("Running"));
        assert_eq!(field(&object, "status.podIP"), None);
    }
}
