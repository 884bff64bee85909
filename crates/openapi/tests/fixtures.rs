//! Converts real OpenAPI documents (see `fixtures/README.md`) and checks the
//! result as the server would: every operation accounted for, every
//! manifest valid.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Value};
use toolserver_domain::{InputSchema, ToolDescription, ToolLimits, ToolName};
use toolserver_openapi::{convert, Conversion, ImportOptions};

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn load(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every method of every path item, counted straight from the document.
fn count_operations(document: &Value) -> usize {
    document["paths"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_object)
        .map(|item| {
            item.keys()
                .filter(|k| METHODS.contains(&k.as_str()))
                .count()
        })
        .sum()
}

/// The checks every conversion must pass; returns the manifests by name.
fn check(document: &Value, conversion: &Conversion) -> BTreeMap<String, Value> {
    assert_eq!(
        conversion.created.len() + conversion.skipped.len(),
        count_operations(document)
    );
    for skip in &conversion.skipped {
        assert!(!skip.reason.trim().is_empty(), "{skip:?}");
    }
    let mut by_name = BTreeMap::new();
    let mut operations = HashSet::new();
    for tool in &conversion.created {
        let manifest = &tool.manifest;
        let name = manifest["name"].as_str().unwrap();
        ToolName::parse(name).unwrap();
        ToolDescription::parse(
            manifest["description"].as_str().unwrap(),
            &ToolLimits::DEFAULT,
        )
        .unwrap();
        InputSchema::parse(manifest["inputSchema"].clone(), &ToolLimits::DEFAULT)
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(manifest["kind"], "http");
        assert!(
            ["read", "idempotent", "side_effect"].contains(&manifest["effects"].as_str().unwrap())
        );
        assert!(manifest["http"]["url"]
            .as_str()
            .unwrap()
            .starts_with("http"));
        assert!(
            operations.insert(tool.operation.clone()),
            "{} twice",
            tool.operation
        );
        assert!(
            by_name.insert(name.to_owned(), manifest.clone()).is_none(),
            "{name} twice"
        );
    }
    by_name
}

/// Skip reasons grouped by kind (quoted names and numbers stripped).
fn grouped_reasons(conversion: &Conversion) -> BTreeMap<String, usize> {
    let mut groups = BTreeMap::new();
    for skip in &conversion.skipped {
        let mut kind = String::new();
        let mut quoted = false;
        for c in skip.reason.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    if quoted {
                        kind.push_str("\"…\"");
                    }
                }
                _ if quoted => {}
                '0'..='9' => {
                    if !kind.ends_with('N') {
                        kind.push('N');
                    }
                }
                _ => kind.push(c),
            }
        }
        *groups.entry(kind).or_insert(0) += 1;
    }
    groups
}

fn report(fixture: &str, conversion: &Conversion) {
    eprintln!(
        "{fixture}: created {}, skipped {}",
        conversion.created.len(),
        conversion.skipped.len()
    );
    for (kind, count) in grouped_reasons(conversion) {
        eprintln!("  {count:>4} × {kind}");
    }
}

fn petstore_options() -> ImportOptions {
    ImportOptions {
        namespace: Some("petstore".into()),
        secret: Some("PETSTORE_TOKEN".into()),
        connection: Some("petstore".into()),
        ..ImportOptions::default()
    }
}

#[test]
fn petstore_3_0_converts_every_operation() {
    let document = load("petstore3.json");
    let conversion = convert(&document, &petstore_options()).unwrap();
    report("petstore3.json", &conversion);
    let manifests = check(&document, &conversion);
    assert_eq!(conversion.skipped, vec![]);
    assert_eq!(conversion.created.len(), 19);
    assert!(conversion.unmatched.is_empty());

    assert_eq!(
        manifests["petstore_getPetById"],
        json!({
            "name": "petstore_getPetById",
            "description": "Find pet by ID. Returns a single pet.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "petId": {"type": "integer", "format": "int64", "description": "ID of pet to return"},
                },
                "required": ["petId"],
                "additionalProperties": false,
            },
            "effects": "read",
            "kind": "http",
            "http": {
                "method": "GET",
                "url": "https://petstore3.swagger.io/api/v3/pet/{petId}",
                "query": {},
                "headers": {"api_key": "{{secret.PETSTORE_TOKEN}}"},
            },
        })
    );

    let add = &manifests["petstore_addPet"];
    assert_eq!(add["effects"], "side_effect");
    assert_eq!(add["description"], "Add a new pet to the store.");
    assert_eq!(
        add["http"],
        json!({
            "method": "POST",
            "url": "https://petstore3.swagger.io/api/v3/pet",
            "query": {},
            "headers": {"Authorization": "Bearer {{connection.petstore.access_token}}"},
            "body": "{{input.body}}",
            "bodyType": "json",
        })
    );
    let input = &add["inputSchema"];
    assert_eq!(
        input["properties"]["body"],
        json!({"$ref": "#/$defs/Pet", "description": "Create a new pet in the store"})
    );
    assert_eq!(input["required"], json!(["body"]));
    let defs: Vec<&String> = input["$defs"].as_object().unwrap().keys().collect();
    assert_eq!(defs.len(), 3);
    for name in ["Pet", "Category", "Tag"] {
        assert!(input["$defs"].get(name).is_some(), "{name} in {defs:?}");
    }
    let pet = &input["$defs"]["Pet"];
    assert_eq!(
        pet["properties"]["category"],
        json!({"$ref": "#/$defs/Category"})
    );
    assert_eq!(
        pet["properties"]["id"],
        json!({"type": "integer", "format": "int64"})
    );
    assert!(pet.get("xml").is_none() && pet.get("x-swagger-router-model").is_none());

    let upload = &manifests["petstore_uploadFile"];
    assert!(upload["http"].get("body").is_none());
    let upload_tool = conversion
        .created
        .iter()
        .find(|t| t.operation_id.as_deref() == Some("uploadFile"))
        .unwrap();
    assert!(upload_tool.notes[0].contains("application/octet-stream"));
    assert_eq!(manifests["petstore_deletePet"]["effects"], "idempotent");
}

#[test]
fn petstore_relative_servers_need_a_base() {
    let mut document = load("petstore3.json");
    document["servers"] = json!([{"url": "/api/v3"}]);
    let conversion = convert(&document, &ImportOptions::default()).unwrap();
    check(&document, &conversion);
    assert!(conversion.created.is_empty());
    assert!(conversion
        .skipped
        .iter()
        .all(|s| s.reason == "no absolute server URL; pass baseUrl"));

    let options = ImportOptions {
        source_url: Some("https://petstore3.swagger.io/openapi.json".into()),
        operations: Some(vec![
            "getPetById".into(),
            "get /store/inventory".into(),
            "nope".into(),
        ]),
        ..ImportOptions::default()
    };
    let conversion = convert(&document, &options).unwrap();
    let urls: Vec<&str> = conversion
        .created
        .iter()
        .map(|t| t.manifest["http"]["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        urls,
        [
            "https://petstore3.swagger.io/api/v3/pet/{petId}",
            "https://petstore3.swagger.io/api/v3/store/inventory",
        ]
    );
    assert_eq!(conversion.unmatched, ["nope"]);
}

#[test]
fn petstore_3_1_converts_every_operation() {
    let document = load("petstore-3.1.json");
    assert_eq!(document["openapi"], "3.1.0");
    let options = ImportOptions {
        source_url: Some("https://petstore31.swagger.io/api/v31/openapi.json".into()),
        ..petstore_options()
    };
    let conversion = convert(&document, &options).unwrap();
    report("petstore-3.1.json", &conversion);
    let manifests = check(&document, &conversion);
    assert_eq!(count_operations(&document), 3);
    assert!(conversion.unmatched.is_empty());
    assert_eq!(conversion.skipped, vec![]);
    assert_eq!(conversion.created.len(), 3);

    // `Pet.petDetails` is `{"$ref": "/api/v31/components/schemas/petdetails"}`
    // and `Pet.petDetailsId` is `{"$ref": ".../petdetails#pet_details_id"}`:
    // JSON Schema 2020-12 references to the `$id` of `PetDetails` and to an
    // `$anchor` inside it, which resolve in the document.
    let input = &manifests["petstore_addPet"]["inputSchema"];
    let defs = &input["$defs"];
    let mut def_names: Vec<&String> = defs.as_object().unwrap().keys().collect();
    def_names.sort();
    assert_eq!(
        def_names,
        [
            "Category",
            "Pet",
            "PetDetails",
            "PetDetails_properties_id",
            "Tag"
        ]
    );
    let pet = &defs["Pet"]["properties"];
    assert_eq!(pet["petDetails"], json!({"$ref": "#/$defs/PetDetails"}));
    assert_eq!(
        pet["petDetailsId"],
        json!({"$ref": "#/$defs/PetDetails_properties_id", "type": "integer", "format": "int64"})
    );
    assert_eq!(
        defs["PetDetails"]["properties"]["category"],
        json!({"$ref": "#/$defs/Category", "description": "PetDetails Category"})
    );
    assert_eq!(
        defs["PetDetails"]["properties"]["tag"],
        json!({"$ref": "#/$defs/Tag"})
    );
    assert!(defs["PetDetails"].get("$id").is_none() && defs["Pet"].get("$schema").is_none());

    let validator = InputSchema::parse(input.clone(), &ToolLimits::DEFAULT)
        .unwrap()
        .compile()
        .unwrap();
    let details = json!({"id": 10, "category": {"id": 1, "name": "Dogs"}, "tag": {"id": 2}});
    let valid = json!({"body": {
        "id": 1, "name": "doggie", "photoUrls": [], "petDetailsId": 10, "petDetails": details,
    }});
    assert!(validator.is_valid(&valid));
    for (pointer, wrong) in [
        ("/body/petDetails/category/id", json!("one")),
        ("/body/petDetails/tag/id", json!(2.5)),
        ("/body/petDetailsId", json!("ten")),
        ("/body/petDetails/id", json!(null)),
    ] {
        let mut invalid = valid.clone();
        *invalid.pointer_mut(pointer).unwrap() = wrong;
        assert!(!validator.is_valid(&invalid), "{pointer}");
    }

    assert_eq!(
        manifests["petstore_getPetById"],
        json!({
            "name": "petstore_getPetById",
            "description": "Find pet by it's identifier. Returns a pet when 0 < ID <= 10.  ID > 10 or non-integers will simulate API error conditions.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "petId": {
                        "type": "integer",
                        "format": "int64",
                        "description": "ID of pet that needs to be fetched",
                        "exclusiveMaximum": 10,
                        "exclusiveMinimum": 1,
                    },
                },
                "required": ["petId"],
                "additionalProperties": false,
            },
            "effects": "read",
            "kind": "http",
            "http": {
                "method": "GET",
                "url": "https://petstore31.swagger.io/api/v31/pet/{petId}",
                "query": {},
                "headers": {"Authorization": "Bearer {{connection.petstore.access_token}}"},
            },
        })
    );
}

#[test]
fn tictactoe_3_1_converts_every_operation() {
    let document = load("tictactoe-3.1.json");
    let options = ImportOptions {
        secret: Some("TTT".into()),
        ..ImportOptions::default()
    };
    let conversion = convert(
        &document,
        &ImportOptions {
            base_url: Some("https://tictactoe.example.com".into()),
            ..options
        },
    )
    .unwrap();
    report("tictactoe-3.1.json", &conversion);
    let manifests = check(&document, &conversion);
    assert_eq!(conversion.created.len(), 3);
    let put = &manifests["put-square"];
    assert_eq!(put["effects"], "idempotent");
    assert_eq!(
        put["http"]["url"],
        "https://tictactoe.example.com/board/{row}/{column}"
    );
    assert_eq!(
        put["http"]["headers"],
        json!({"Authorization": "Bearer {{secret.TTT}}"})
    );
    assert_eq!(
        put["inputSchema"]["required"],
        json!(["row", "column", "body"])
    );
    assert_eq!(put["inputSchema"]["$defs"]["mark"]["example"], ".");
    assert_eq!(
        put["inputSchema"]["properties"]["row"],
        json!({"$ref": "#/$defs/coordinate", "description": "Board row (vertical coordinate)"})
    );
}

#[test]
fn asana_converts_nearly_every_operation() {
    let document = load("asana.json");
    let options = ImportOptions {
        namespace: Some("asana".into()),
        connection: Some("asana".into()),
        secret: Some("ASANA_PAT".into()),
        ..ImportOptions::default()
    };
    let conversion = convert(&document, &options).unwrap();
    report("asana.json", &conversion);
    check(&document, &conversion);
    let total = count_operations(&document);
    assert!(total >= 200, "{total}");
    assert!(
        conversion.created.len() * 100 >= total * 95,
        "{} of {total} created",
        conversion.created.len()
    );
}

#[test]
fn refuses_swagger_2() {
    let err = convert(
        &json!({"swagger": "2.0", "paths": {}}),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(err
        .to_string()
        .contains("only OpenAPI 3.0 and 3.1 are supported"));
}
