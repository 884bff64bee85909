//! Lays the contract (`contract.yaml`) over the document the routes
//! generate. The routes give the paths, operations and their statuses; the
//! contract gives every rule a request is checked against, which the Rust
//! types alone cannot carry (patterns, bounds, shapes of free-form JSON,
//! links between operations).

use serde_json::{json, Map, Value};

/// The contract rules, as written.
const CONTRACT: &str = include_str!("contract.yaml");

/// `generated` with the contract laid over it. The generated document
/// always has `components.schemas` and `paths`, where the contract lands.
pub fn apply(mut generated: Value) -> Result<Value, serde_yaml::Error> {
    let mut contract: Value = serde_yaml::from_str(CONTRACT)?;
    let path_parameters = take(&mut contract, "x-path-parameters");
    let query_parameters = take(&mut contract, "x-query-parameters");
    let header_parameters = take(&mut contract, "x-header-parameters");
    if let (Some(schemas), Some(target)) = (
        contract
            .pointer_mut("/components/schemas")
            .and_then(Value::as_object_mut),
        generated
            .pointer_mut("/components/schemas")
            .and_then(Value::as_object_mut),
    ) {
        for (name, schema) in std::mem::take(schemas) {
            target.insert(name, schema);
        }
    }
    for_each_operation(&mut generated, |operation| {
        type_parameters(
            operation,
            [&path_parameters, &query_parameters, &header_parameters],
        );
        document_refusals(operation);
        type_event_streams(operation);
    });
    if let (Some(paths), Some(target)) = (
        contract.get_mut("paths").map(std::mem::take),
        generated.get_mut("paths").and_then(Value::as_object_mut),
    ) {
        merge(target, paths);
    }
    Ok(generated)
}

fn take(contract: &mut Value, key: &str) -> Map<String, Value> {
    match contract.as_object_mut().and_then(|c| c.remove(key)) {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

fn for_each_operation(document: &mut Value, mut visit: impl FnMut(&mut Map<String, Value>)) {
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut().filter_map(Value::as_object_mut) {
            visit(operation);
        }
    }
}

/// Gives each path, query and header parameter its schema from the
/// contract; `tables` are those of each, in this order.
fn type_parameters(operation: &mut Map<String, Value>, tables: [&Map<String, Value>; 3]) {
    let [path_parameters, query_parameters, header_parameters] = tables;
    let Some(parameters) = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for parameter in parameters.iter_mut().filter_map(Value::as_object_mut) {
        let name = parameter.get("name").and_then(Value::as_str).unwrap_or("");
        let table = match parameter.get("in").and_then(Value::as_str) {
            Some("path") => path_parameters,
            Some("query") => query_parameters,
            Some("header") => header_parameters,
            _ => continue,
        };
        if let Some(schema) = table.get(name) {
            parameter.insert("schema".into(), schema.clone());
        }
    }
}

/// Every operation that reads a JSON body can refuse its media type (415),
/// its syntax (400) and its size (413, past `TOOLSERVER_MAX_REQUEST_BYTES`);
/// every operation with parameters can refuse them (400); every operation
/// can refuse a URL past `TOOLSERVER_MAX_URI_BYTES` (414); every operation
/// but the liveness probe can time out (408) or find a dependency down
/// (503).
fn document_refusals(operation: &mut Map<String, Value>) {
    let operation_id = operation
        .get("operationId")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let takes_json = operation
        .get("requestBody")
        .and_then(|body| body.pointer("/content/application~1json"))
        .is_some();
    let has_parameters = operation
        .get("parameters")
        .and_then(Value::as_array)
        .is_some_and(|p| !p.is_empty());
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let error = |description: &str| {
        json!({
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        })
    };
    if takes_json || has_parameters {
        responses
            .entry("400")
            .or_insert_with(|| error("Malformed request"));
    }
    if takes_json {
        responses
            .entry("415")
            .or_insert_with(|| error("The body is not `application/json`"));
        responses.entry("413").or_insert_with(|| {
            error("The body is over the request size limit (`TOOLSERVER_MAX_REQUEST_BYTES`)")
        });
    }
    responses
        .entry("414")
        .or_insert_with(|| error("The URL is over its length limit (`TOOLSERVER_MAX_URI_BYTES`)"));
    let is_liveness = operation_id == "healthz";
    if !is_liveness {
        responses
            .entry("408")
            .or_insert_with(|| error("The response head did not come within the request timeout"));
        responses.entry("503").or_insert_with(|| {
            error("A dependency (the database, the bundle store) is unreachable right now")
        });
    }
}

/// A `text/event-stream` response is described event by event.
fn type_event_streams(operation: &mut Map<String, Value>) {
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for response in responses.values_mut() {
        if let Some(stream) = response.pointer_mut("/content/text~1event-stream") {
            stream["schema"] = json!({"$ref": "#/components/schemas/SseEvent"});
        }
    }
}

/// Merges `overlay` into `target`: objects key by key, anything else replaced.
fn merge(target: &mut Map<String, Value>, overlay: Value) {
    let Value::Object(overlay) = overlay else {
        return;
    };
    for (key, value) in overlay {
        match (target.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(incoming)) => {
                merge(existing, Value::Object(incoming));
            }
            (_, value) => {
                target.insert(key, value);
            }
        }
    }
}
