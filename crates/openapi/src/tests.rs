//! End-to-end checks of [`convert`] on small documents.

use serde_json::{json, Value};
use toolserver_domain::{InputSchema, ToolLimits};

use crate::{convert, Conversion, ImportOptions};

fn document(paths: Value) -> Value {
    json!({
        "openapi": "3.0.3",
        "servers": [{"url": "https://api.example.com/v1/"}],
        "paths": paths,
        "components": {
            "schemas": {
                "Node": {"type": "object", "properties": {
                    "next": {"$ref": "#/components/schemas/Node"},
                    "value": {"type": "string", "nullable": true},
                }},
            },
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "key": {"type": "apiKey", "in": "query", "name": "api_key"},
            },
        },
    })
}

fn run(paths: Value, options: &ImportOptions) -> Conversion {
    convert(&document(paths), options).unwrap()
}

fn only_manifest(conversion: &Conversion) -> &Value {
    assert_eq!(conversion.skipped, vec![]);
    assert_eq!(conversion.created.len(), 1);
    &conversion.created[0].manifest
}

#[test]
fn skips_operations_with_external_refs_and_keeps_the_rest() {
    let conversion = run(
        json!({"/a": {
            "get": {"operationId": "ok", "parameters": [
                {"name": "n", "in": "query", "schema": {"$ref": "#/components/schemas/Node"}}]},
            "post": {"operationId": "external", "requestBody": {"content": {"application/json": {
                "schema": {"$ref": "https://example.com/schemas.json#/Pet"}}}}},
        }}),
        &ImportOptions::default(),
    );
    assert_eq!(conversion.created.len(), 1);
    let input = &conversion.created[0].manifest["inputSchema"];
    assert_eq!(input["properties"]["n"], json!({"$ref": "#/$defs/Node"}));
    assert_eq!(
        input["$defs"]["Node"]["properties"]["next"],
        json!({"$ref": "#/$defs/Node"})
    );
    assert_eq!(
        input["$defs"]["Node"]["properties"]["value"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(conversion.skipped.len(), 1);
    let skip = &conversion.skipped[0];
    assert_eq!(skip.operation, "POST /a");
    assert_eq!(skip.operation_id.as_deref(), Some("external"));
    assert!(
        skip.reason
            .contains("external $ref \"https://example.com/schemas.json#/Pet\""),
        "{}",
        skip.reason
    );
}

#[test]
fn sanitizes_path_parameters_that_are_not_varnames() {
    let conversion = run(
        json!({"/pets/{pet-id}/toys/{toy.id}": {"get": {"parameters": [
            {"name": "pet-id", "in": "path", "required": true, "schema": {"type": "string"}},
            {"name": "pet_id", "in": "query", "schema": {"type": "string"}},
            {"name": "page-size", "in": "query", "schema": {"type": "integer"}},
            {"name": "X-Request-Id", "in": "header", "required": true, "schema": {"type": "string"}},
        ]}}}),
        &ImportOptions::default(),
    );
    let manifest = only_manifest(&conversion);
    assert_eq!(manifest["name"], "get_pets_pet-id_toys_toy_id");
    assert_eq!(
        manifest["http"]["url"],
        "https://api.example.com/v1/pets/{pet_id}/toys/{toy.id}"
    );
    assert_eq!(
        manifest["http"]["query"],
        json!({"pet_id": "{{input.pet_id_2}}", "page-size": "{{input.page-size}}"})
    );
    assert_eq!(
        manifest["http"]["headers"],
        json!({"X-Request-Id": "{{input.X-Request-Id}}"})
    );
    let input = &manifest["inputSchema"];
    let mut names: Vec<&String> = input["properties"].as_object().unwrap().keys().collect();
    names.sort();
    assert_eq!(
        names,
        ["X-Request-Id", "page-size", "pet_id", "pet_id_2", "toy.id"]
    );
    assert_eq!(
        input["required"],
        json!(["pet_id", "toy.id", "X-Request-Id"])
    );
    assert_eq!(input["properties"]["toy.id"], json!({}));
}

#[test]
fn filters_operations_and_reports_unmatched_entries() {
    let paths = json!({
        "/a": {"get": {"operationId": "listA"}, "post": {"operationId": "makeA"}},
        "/b/{id}": {"delete": {}},
    });
    let options = ImportOptions {
        operations: Some(vec![
            "listA".into(),
            "DELETE /b/{id}".into(),
            "get /missing".into(),
            "nothing".into(),
        ]),
        ..ImportOptions::default()
    };
    let conversion = run(paths, &options);
    let operations: Vec<&str> = conversion
        .created
        .iter()
        .map(|t| t.operation.as_str())
        .collect();
    assert_eq!(operations, ["GET /a", "DELETE /b/{id}"]);
    assert!(conversion.skipped.is_empty());
    assert_eq!(conversion.unmatched, ["get /missing", "nothing"]);
    assert_eq!(conversion.created[1].manifest["name"], "delete_b_id");
    assert_eq!(conversion.created[1].manifest["effects"], "idempotent");
}

#[test]
fn relative_servers_use_base_url_or_source_url() {
    let mut doc =
        document(json!({"/a": {"get": {"servers": [{"url": "/op"}]}}, "/b": {"get": {}}}));
    doc["servers"] = json!([{"url": "/api"}]);
    let skipped = convert(&doc, &ImportOptions::default()).unwrap();
    assert_eq!(skipped.skipped.len(), 2);
    assert!(skipped
        .skipped
        .iter()
        .all(|s| s.reason == "no absolute server URL; pass baseUrl"));

    let from_source = ImportOptions {
        source_url: Some("https://docs.example.com/specs/openapi.yaml".into()),
        ..ImportOptions::default()
    };
    let urls = |conversion: Conversion| -> Vec<String> {
        conversion
            .created
            .iter()
            .map(|t| t.manifest["http"]["url"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        urls(convert(&doc, &from_source).unwrap()),
        [
            "https://docs.example.com/op/a",
            "https://docs.example.com/api/b"
        ]
    );
    let with_base = ImportOptions {
        base_url: Some("https://proxy.example.com/x/".into()),
        ..from_source
    };
    assert_eq!(
        urls(convert(&doc, &with_base).unwrap()),
        [
            "https://proxy.example.com/x/a",
            "https://proxy.example.com/x/b"
        ]
    );
}

#[test]
fn security_becomes_header_and_query_placeholders() {
    let paths = json!({
        "/bearer": {"get": {"security": [{"bearer": []}]}},
        "/key": {"get": {"security": [{"key": []}], "parameters": [
            {"name": "api_key", "in": "query", "schema": {"type": "string"}}]}},
        "/open": {"get": {"security": []}},
    });
    let options = ImportOptions {
        secret: Some("EXAMPLE_TOKEN".into()),
        ..ImportOptions::default()
    };
    let conversion = run(paths.clone(), &options);
    let http: Vec<&Value> = conversion
        .created
        .iter()
        .map(|t| &t.manifest["http"])
        .collect();
    assert_eq!(
        http[0]["headers"],
        json!({"Authorization": "Bearer {{secret.EXAMPLE_TOKEN}}"})
    );
    assert_eq!(
        http[1]["query"],
        json!({"api_key": "{{secret.EXAMPLE_TOKEN}}"})
    );
    assert_eq!(
        conversion.created[1].manifest["inputSchema"]["properties"],
        json!({})
    );
    assert_eq!(
        (&http[2]["headers"], &http[2]["query"]),
        (&json!({}), &json!({}))
    );

    let without_secret = run(paths, &ImportOptions::default());
    assert_eq!(without_secret.created.len(), 3);
    assert_eq!(
        without_secret.created[0].manifest["http"]["headers"],
        json!({})
    );
    assert!(without_secret.created[0].notes[0].contains("needs the secret option"));
}

#[test]
fn form_bodies_are_sent_as_form() {
    let conversion = run(
        json!({"/login": {"post": {
            "parameters": [{"name": "body", "in": "query", "schema": {"type": "string"}}],
            "requestBody": {"required": true, "description": "Credentials", "content": {
                "application/x-www-form-urlencoded": {"schema": {"type": "object", "properties": {
                    "user": {"type": "string", "example": "me"}}}},
            }},
        }}}),
        &ImportOptions::default(),
    );
    let manifest = only_manifest(&conversion);
    assert_eq!(manifest["effects"], "side_effect");
    assert_eq!(manifest["http"]["body"], "{{input.body_2}}");
    assert_eq!(manifest["http"]["bodyType"], "form");
    assert_eq!(manifest["http"]["query"], json!({"body": "{{input.body}}"}));
    assert_eq!(
        manifest["inputSchema"]["properties"]["body_2"],
        json!({"type": "object", "description": "Credentials", "properties": {"user": {"type": "string"}}})
    );
    assert_eq!(manifest["inputSchema"]["required"], json!(["body_2"]));
}

#[test]
fn required_multipart_bodies_are_skipped_and_optional_ones_dropped() {
    let multipart = |required: bool| {
        json!({"requestBody": {"required": required, "content": {
            "multipart/form-data": {"schema": {"type": "object"}}}}})
    };
    let conversion = run(
        json!({"/upload": {"post": multipart(true), "put": multipart(false)}}),
        &ImportOptions::default(),
    );
    assert_eq!(conversion.skipped.len(), 1);
    assert_eq!(conversion.skipped[0].operation, "POST /upload");
    assert!(conversion.skipped[0].reason.contains("multipart/form-data"));
    assert_eq!(conversion.created.len(), 1);
    let put = &conversion.created[0];
    assert!(put.manifest["http"].get("body").is_none());
    assert!(put.notes[0].contains("multipart/form-data"));
}

#[test]
fn skips_required_cookies_and_oversized_schemas() {
    let huge: serde_json::Map<String, Value> = (0..3000)
        .map(|i| {
            (
                format!("field_{i}"),
                json!({"type": "string", "description": "x".repeat(20)}),
            )
        })
        .collect();
    let conversion = run(
        json!({
            "/cookie": {"get": {"parameters": [{"name": "sid", "in": "cookie", "required": true}]}},
            "/huge": {"post": {"requestBody": {"content": {"application/json": {
                "schema": {"type": "object", "properties": huge}}}}}},
        }),
        &ImportOptions::default(),
    );
    let reasons: Vec<&str> = conversion
        .skipped
        .iter()
        .map(|s| s.reason.as_str())
        .collect();
    assert_eq!(reasons.len(), 2);
    assert_eq!(
        reasons[0],
        "required cookie parameter \"sid\" is not supported"
    );
    assert!(reasons[1].starts_with("inputSchema: is "), "{}", reasons[1]);
    assert!(
        reasons[1].ends_with("bytes of JSON; the limit is 65536"),
        "{}",
        reasons[1]
    );
}

#[test]
fn deprecated_operations_are_created_and_marked() {
    let conversion = run(
        json!({"/old": {"get": {"deprecated": true, "summary": "Old way"}}}),
        &ImportOptions {
            namespace: Some("ex".into()),
            ..ImportOptions::default()
        },
    );
    let manifest = only_manifest(&conversion);
    assert_eq!(manifest["description"], "Deprecated. Old way");
    assert_eq!(manifest["name"], "ex_get_old");
}

#[test]
fn output_is_sorted_whatever_the_document_order() {
    let conversion = run(
        json!({"/b": {"post": {}, "get": {}}, "/a": {"trace": {}, "delete": {}}}),
        &ImportOptions::default(),
    );
    let operations: Vec<&str> = conversion
        .created
        .iter()
        .map(|t| t.operation.as_str())
        .collect();
    assert_eq!(operations, ["DELETE /a", "TRACE /a", "GET /b", "POST /b"]);
    let serialized = serde_json::to_value(&conversion).unwrap();
    assert_eq!(serialized["created"][0]["operationId"], Value::Null);
    assert!(serialized["created"][0].get("notes").is_none());
    assert_eq!(serialized["unmatched"], json!([]));
}

#[test]
fn refs_to_ids_and_anchors_resolve_in_the_document() {
    let body = |schema: Value| {
        json!({"requestBody": {"required": true, "content": {
        "application/json": {"schema": schema}}}})
    };
    let document = json!({
        "openapi": "3.1.0",
        "servers": [{"url": "https://api.example.com"}],
        "paths": {
            "/owners": {"post": body(json!({"$ref": "https://schemas.example.com/owner"}))},
            "/names": {"get": {"parameters": [{"name": "q", "in": "query", "schema":
                {"$ref": "https://schemas.example.com/owner#ownerName"}}]}},
            "/elsewhere": {"post": body(json!({"$ref": "https://schemas.example.com/else"}))},
        },
        "components": {"schemas": {
            "Owner": {
                "$id": "https://schemas.example.com/owner",
                "type": "object",
                "properties": {
                    "name": {"$anchor": "ownerName", "type": "string", "minLength": 2},
                    "pet": {"$ref": "pet"},
                    "address": {"$ref": "#/$defs/Address"},
                },
                "$defs": {"Address": {"type": "string"}},
            },
            "Pet": {
                "$id": "https://schemas.example.com/pet",
                "type": "object",
                "properties": {"kind": {"type": "string"}, "owner": {"$ref": "owner"}},
                "required": ["kind"],
            },
        }},
    });
    let conversion = convert(&document, &ImportOptions::default()).unwrap();
    let skipped: Vec<(&str, &str)> = conversion
        .skipped
        .iter()
        .map(|s| (s.operation.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(
        skipped,
        [(
            "POST /elsewhere",
            "request body: external $ref \"https://schemas.example.com/else\" is not supported"
        )]
    );
    assert_eq!(conversion.created.len(), 2);

    let names = &conversion.created[0].manifest["inputSchema"];
    assert_eq!(
        names["properties"]["q"],
        json!({"$ref": "#/$defs/Owner_properties_name"})
    );
    assert_eq!(
        names["$defs"],
        json!({"Owner_properties_name": {"type": "string", "minLength": 2}})
    );

    let owners = &conversion.created[1].manifest["inputSchema"];
    assert_eq!(
        owners["properties"]["body"],
        json!({"$ref": "#/$defs/Owner"})
    );
    let defs = &owners["$defs"];
    let mut def_names: Vec<&String> = defs.as_object().unwrap().keys().collect();
    def_names.sort();
    assert_eq!(def_names, ["Owner", "Owner__defs_Address", "Pet"]);
    assert_eq!(
        defs["Owner"]["properties"]["pet"],
        json!({"$ref": "#/$defs/Pet"})
    );
    assert_eq!(
        defs["Owner"]["properties"]["address"],
        json!({"$ref": "#/$defs/Owner__defs_Address"})
    );
    assert_eq!(
        defs["Pet"]["properties"]["owner"],
        json!({"$ref": "#/$defs/Owner"})
    );
    let text = owners.to_string();
    assert!(!text.contains("$id") && !text.contains("$anchor"), "{text}");

    let validator = InputSchema::parse(owners.clone(), &ToolLimits::DEFAULT)
        .unwrap()
        .compile()
        .unwrap();
    let pet = json!({"kind": "cat", "owner": {"name": "Al"}});
    assert!(validator.is_valid(&json!({"body": {"name": "Bo", "pet": pet, "address": "x"}})));
    assert!(!validator.is_valid(&json!({"body": {"pet": {}}})));
    assert!(!validator.is_valid(&json!({"body": {"pet": {"kind": "cat", "owner": {"name": "A"}}}})));
    assert!(!validator.is_valid(&json!({"body": {"address": 1}})));

    let mut with_id = owners.clone();
    with_id["$defs"]["Owner"]["$id"] = json!("https://schemas.example.com/owner");
    let err = InputSchema::parse(with_id, &ToolLimits::DEFAULT).unwrap_err();
    assert!(err.to_string().contains("/$defs/"), "{err}");
}
