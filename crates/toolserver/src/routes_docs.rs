//! `docs/routes.md`: every operation of the OpenAPI document the server
//! publishes, one table per tag (method, path, summary, authentication).
//! `toolserver routes-docs` prints it and `make routes-docs` writes it; a
//! test fails when the committed page differs from what this renders.

use serde_json::Value;

/// The methods an OpenAPI path item may hold, in the order a table lists them.
const METHODS: &[&str] = &[
    "get", "put", "post", "patch", "delete", "head", "options", "trace",
];

/// The heading operations without a tag are listed under.
const UNTAGGED: &str = "other";

/// The routes page of the contract the server publishes (`openapi.yaml`).
pub fn markdown() -> anyhow::Result<String> {
    Ok(render(&toolserver_api::contract()?))
}

/// The routes page of an OpenAPI document.
pub fn render(doc: &Value) -> String {
    let operations = operations(doc);
    let mut page = String::from(
        "# Routes\n\
         \n\
         Every route of the HTTP API, generated from the OpenAPI document the\n\
         server produces (`toolserver routes-docs`, `make routes-docs`; a test\n\
         fails when this page differs). `openapi.yaml` holds each route's\n\
         parameters, bodies, statuses and errors.\n",
    );
    for (tag, description) in tags(doc, &operations) {
        page.push_str(&format!("\n## {tag}\n\n"));
        if let Some(description) = description {
            let sentence = one_line(&description);
            page.push_str(&format!("{}.\n\n", sentence.trim_end_matches('.')));
        }
        page.push_str("| method | path | what it does | authentication |\n");
        page.push_str("|---|---|---|---|\n");
        for operation in operations.iter().filter(|op| op.tag == tag) {
            page.push_str(&format!(
                "| `{}` | `{}` | {} | {} |\n",
                operation.method.to_uppercase(),
                operation.path,
                cell(&operation.summary),
                cell(&operation.auth),
            ));
        }
    }
    page
}

/// One row of a table.
struct Operation {
    tag: String,
    method: String,
    path: String,
    summary: String,
    auth: String,
}

/// Every operation of `doc`, by path, then method in [`METHODS`] order.
fn operations(doc: &Value) -> Vec<Operation> {
    let mut paths: Vec<(&String, &Value)> = doc["paths"]
        .as_object()
        .map(|paths| paths.iter().collect())
        .unwrap_or_default();
    paths.sort_by(|a, b| a.0.cmp(b.0));
    let mut rows = Vec::new();
    for (path, item) in paths {
        for method in METHODS {
            let Some(operation) = item.get(*method) else {
                continue;
            };
            rows.push(Operation {
                tag: operation["tags"][0].as_str().unwrap_or(UNTAGGED).to_owned(),
                method: (*method).to_owned(),
                path: path.clone(),
                summary: operation["summary"]
                    .as_str()
                    .or_else(|| operation["operationId"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                auth: authentication(doc, operation),
            });
        }
    }
    rows
}

/// The tags that have operations, with their descriptions: first in the
/// document's own `tags` order, then any other, alphabetically.
fn tags(doc: &Value, operations: &[Operation]) -> Vec<(String, Option<String>)> {
    let declared: Vec<(String, Option<String>)> = doc["tags"]
        .as_array()
        .map(|tags| {
            tags.iter()
                .filter_map(|tag| {
                    let name = tag["name"].as_str()?.to_owned();
                    let description = tag["description"].as_str().map(str::to_owned);
                    Some((name, description))
                })
                .collect()
        })
        .unwrap_or_default();
    let used = |name: &str| operations.iter().any(|op| op.tag == name);
    let mut listed: Vec<(String, Option<String>)> = declared
        .iter()
        .filter(|(name, _)| used(name))
        .cloned()
        .collect();
    let mut others: Vec<String> = operations
        .iter()
        .map(|op| op.tag.clone())
        .filter(|tag| !declared.iter().any(|(name, _)| name == tag))
        .collect();
    others.sort();
    others.dedup();
    listed.extend(others.into_iter().map(|tag| (tag, None)));
    listed
}

/// What a request to `operation` must carry: its own `security`, else the
/// document's; alternatives are joined with "or", schemes required together
/// with "and".
fn authentication(doc: &Value, operation: &Value) -> String {
    let requirements = operation
        .get("security")
        .or_else(|| doc.get("security"))
        .and_then(Value::as_array);
    let alternatives: Vec<String> = requirements
        .map(|requirements| {
            requirements
                .iter()
                .map(|requirement| {
                    let schemes: Vec<String> = requirement
                        .as_object()
                        .map(|schemes| schemes.keys().map(|name| scheme(doc, name)).collect())
                        .unwrap_or_default();
                    if schemes.is_empty() {
                        "none".to_owned()
                    } else {
                        schemes.join(" and ")
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if alternatives.is_empty() {
        "none".to_owned()
    } else {
        alternatives.join(" or ")
    }
}

/// How the security scheme `name` is presented, from its definition in
/// `components.securitySchemes`.
fn scheme(doc: &Value, name: &str) -> String {
    let definition = &doc["components"]["securitySchemes"][name];
    let description = definition["description"].as_str().map(lowercase_first);
    let how = match (
        definition["type"].as_str(),
        definition["scheme"].as_str(),
        definition["in"].as_str(),
    ) {
        (Some("http"), Some(scheme), _) if scheme.eq_ignore_ascii_case("bearer") => {
            match definition["bearerFormat"].as_str() {
                Some(format) => format!("bearer {format}"),
                None => "bearer token".to_owned(),
            }
        }
        (Some("http"), Some(scheme), _) => format!("HTTP {scheme}"),
        (Some("apiKey"), _, Some(place)) => match definition["name"].as_str() {
            Some(key) => format!("`{key}` {place}"),
            None => place.to_owned(),
        },
        _ => name.to_owned(),
    };
    match description {
        Some(description) => format!("{how}: {description}"),
        None => how,
    }
}

/// `text` with its first letter in lower case, to follow a colon.
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `text` on one line, its runs of white space one space each.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` as a table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc() -> Value {
        json!({
            "tags": [
                {"name": "things", "description": "Things\n  of the caller."},
                {"name": "unused", "description": "No operation has it."}
            ],
            "components": {"securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "key": {"type": "apiKey", "in": "header", "name": "x-key", "description": "The key"}
            }},
            "paths": {
                "/things/{id}": {
                    "delete": {"tags": ["things"], "summary": "Deletes a thing.", "security": [{"bearer": []}]},
                    "get": {"tags": ["things"], "summary": "Reads a thing\n(one | many).", "security": [{"bearer": []}, {"key": []}]}
                },
                "/health": {"get": {"summary": "Liveness."}},
                "/z": {"post": {"tags": ["zeta"], "operationId": "zed", "security": []}}
            }
        })
    }

    #[test]
    fn tables_follow_the_declared_tags_then_the_others() {
        let page = render(&doc());
        let things = page.find("## things").unwrap();
        let other = page.find("## other").unwrap();
        let zeta = page.find("## zeta").unwrap();
        assert!(things < other && other < zeta, "{page}");
        assert!(!page.contains("## unused"), "{page}");
        assert!(
            page.contains("## things\n\nThings of the caller.\n\n"),
            "{page}"
        );
    }

    #[test]
    fn rows_name_method_path_summary_and_authentication() {
        let page = render(&doc());
        let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(
            rows,
            [
                "| `GET` | `/things/{id}` | Reads a thing (one \\| many). | bearer JWT or `x-key` header: the key |",
                "| `DELETE` | `/things/{id}` | Deletes a thing. | bearer JWT |",
                "| `GET` | `/health` | Liveness. | none |",
                "| `POST` | `/z` | zed | none |",
            ]
        );
    }

    #[test]
    fn the_document_wide_requirement_applies_where_an_operation_has_none() {
        let mut doc = doc();
        doc["security"] = json!([{"bearer": []}]);
        let page = render(&doc);
        assert!(
            page.contains("| `GET` | `/health` | Liveness. | bearer JWT |"),
            "{page}"
        );
        assert!(page.contains("| `POST` | `/z` | zed | none |"), "{page}");
    }
}
