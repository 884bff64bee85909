//! `openapi.yaml` and the server agree on what they accept: every field the
//! agent-config parser takes is in the contract's schema and every field
//! there is one the parser takes; the contract types every keyword of JSON
//! Schema 2020-12 (or says why the server alone checks it); and on a corpus
//! of agent configs and input schemas, the contract's verdict is the
//! server's.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use toolserver_domain::agent::config::{
    CONFIG_FIELDS, MODEL_FIELDS, MODEL_OPTIONS, PROVIDERS, PROVIDER_FIELDS,
};
use toolserver_domain::agent::mcp::{MCP_AUTH_FIELDS, MCP_SERVER_FIELDS};
use toolserver_domain::agent::{BuiltinTool, TOOL_FLAGS};
use toolserver_domain::{AgentConfig, AgentLimits, InputSchema, ToolId, ToolLimits};

fn contract() -> Value {
    toolserver_api::contract().unwrap()
}

/// The schema `$ref` points at in the contract.
fn resolve<'a>(contract: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(pointer) => {
            let target = contract
                .pointer(pointer.trim_start_matches('#'))
                .unwrap_or_else(|| panic!("{pointer} resolves"));
            resolve(contract, target)
        }
        None => schema,
    }
}

/// `schema` and every schema it takes through `allOf`, `$ref` resolved.
fn parts<'a>(contract: &'a Value, schema: &'a Value) -> Vec<&'a Value> {
    let schema = resolve(contract, schema);
    let mut found = vec![schema];
    for part in schema["allOf"].as_array().into_iter().flatten() {
        found.extend(parts(contract, part));
    }
    found
}

/// The field names the contract gives an object following `schema`.
fn contract_fields(contract: &Value, schema: &Value) -> BTreeSet<String> {
    parts(contract, schema)
        .into_iter()
        .flat_map(|part| {
            let named = part["properties"].as_object().into_iter().flatten();
            named.map(|(name, _)| name.clone())
        })
        .collect()
}

/// The schema the value under `key` follows in an object following `schema`.
fn child<'a>(contract: &'a Value, schema: &'a Value, key: &str) -> &'a Value {
    let parts = parts(contract, schema);
    if let Some(named) = parts.iter().find_map(|part| part["properties"].get(key)) {
        return resolve(contract, named);
    }
    for part in &parts {
        for (pattern, by_pattern) in part["patternProperties"].as_object().into_iter().flatten() {
            if regex::Regex::new(pattern).unwrap().is_match(key) {
                return resolve(contract, by_pattern);
            }
        }
    }
    let extra = parts
        .iter()
        .find_map(|part| part.get("additionalProperties").filter(|e| e.is_object()))
        .unwrap_or_else(|| panic!("the contract has no schema for {key:?}"));
    resolve(contract, extra)
}

/// The contract's schema at `path` below the agent config.
fn config_schema_at<'a>(contract: &'a Value, path: &[&str]) -> &'a Value {
    let mut schema = &contract["components"]["schemas"]["AgentConfig"];
    for key in path {
        schema = child(contract, schema, key);
    }
    schema
}

/// A validator of the contract's schema `name`.
fn validator(contract: &Value, name: &str) -> jsonschema::Validator {
    let root = json!({
        "components": contract["components"],
        "$ref": format!("#/components/schemas/{name}"),
    });
    jsonschema::validator_for(&root).unwrap()
}

#[test]
fn every_config_field_the_server_takes_is_in_the_contract_and_back() {
    let contract = contract();
    let uploaded = ToolId::generate().to_string();
    let mut objects: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec![], CONFIG_FIELDS.to_vec()),
        (vec!["model"], MODEL_FIELDS.to_vec()),
        (vec!["model", "options"], MODEL_OPTIONS.to_vec()),
        (vec!["provider"], PROVIDERS.to_vec()),
        (vec!["tools", &uploaded], TOOL_FLAGS.to_vec()),
        (vec!["mcpServers", "docs"], MCP_SERVER_FIELDS.to_vec()),
        (vec!["mcpServers", "docs", "auth"], MCP_AUTH_FIELDS.to_vec()),
    ];
    for provider in PROVIDERS {
        objects.push((vec!["provider", provider], PROVIDER_FIELDS.to_vec()));
    }
    for builtin in BuiltinTool::ALL {
        let fields = TOOL_FLAGS.iter().chain(builtin.options()).copied();
        objects.push((vec!["tools", builtin.name()], fields.collect()));
    }
    for (path, server) in objects {
        let schema = config_schema_at(&contract, &path);
        let stated = contract_fields(&contract, schema);
        let taken: BTreeSet<String> = server.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            stated,
            taken,
            "config/{}: the contract's fields (left) are not the server's (right)",
            path.join("/")
        );
    }
}

/// Agent configs beside whether the server takes them.
fn config_corpus() -> Vec<(Value, bool)> {
    let model = json!({"provider": "openai", "modelId": "m"});
    let with = |key: &str, value: Value| json!({"model": model, key: value});
    let server = |entry: Value| with("mcpServers", json!({ "docs": entry }));
    let url = "https://mcp.example.com/mcp";
    let full = json!({
        "model": {"provider": "openai", "modelId": "gpt-x", "options": {"temperature": 0.2, "topP": 1, "maxOutputTokens": 9, "seed": -3}},
        "provider": {"openai": {"apiKey": "sk", "baseUrl": "https://api.example.com/v1"}},
        "systemPrompt": "Be brief.",
        "maxSteps": 4,
        "onDisconnect": "cancel",
        "tools": {
            "tavilySearch": {"apiKey": "k", "maxResults": 3, "searchDepth": "basic", "topic": "news", "includeDomains": ["a.example"], "excludeDomains": []},
            "tavilyExtract": {"extractDepth": "advanced", "needsApproval": true, "timeoutMs": 5},
            "googleSearch": {"enabled": false, "async": true},
            ToolId::generate().to_string(): {"async": true, "heartbeatTimeoutSeconds": 5, "timeoutSeconds": 60, "safeToRepeat": true, "region": "eu"},
        },
        "mcpServers": {
            "docs": {
                "url": "https://mcp.example.com:8443/v1/mcp?team=blue",
                "headers": {"X-Team": "blue", "x-trace": "a\tb c"},
                "auth": {"type": "bearer", "token": "t0k-[redacted]"},
                "tools": ["search", "fetch"],
                "needsApproval": ["fetch"],
            },
            "a-b_c": {"url": "http://10.0.0.1/", "needsApproval": true},
            "_": {"url": "http://localhost", "tools": [], "needsApproval": false},
        },
    });
    let mut sixteen = serde_json::Map::new();
    for n in 0..16 {
        sixteen.insert(format!("s{n}"), json!({ "url": url }));
    }
    let mut seventeen = sixteen.clone();
    seventeen.insert("s16".into(), json!({ "url": url }));
    vec![
        (full, true),
        (with("onDisconnect", json!("continue")), true),
        (with("onDisconnect", json!("stop")), false),
        (with("onDisconnect", Value::Null), false),
        (with("mcpServers", Value::Null), true),
        (with("mcpServers", json!({})), true),
        (with("mcpServers", json!([])), false),
        (with("mcpServers", Value::Object(sixteen)), true),
        (with("mcpServers", Value::Object(seventeen)), false),
        (with("mcpServers", json!({ "a__b": {"url": url} })), false),
        (with("mcpServers", json!({ "__": {"url": url} })), false),
        (with("mcpServers", json!({ "": {"url": url} })), false),
        (
            with("mcpServers", json!({ "x".repeat(32): {"url": url} })),
            true,
        ),
        (
            with("mcpServers", json!({ "x".repeat(33): {"url": url} })),
            false,
        ),
        (with("mcpServers", json!({ "a.b": {"url": url} })), false),
        (server(json!({})), false),
        (server(json!("https://x.example")), false),
        (server(json!({"url": url, "colour": 1})), false),
        (server(json!({"url": "ftp://x.example/"})), false),
        (server(json!({"url": "https://user@x.example/"})), false),
        (server(json!({"url": "https://x.example/#top"})), false),
        (server(json!({"url": "https://[::1]/mcp"})), false),
        (server(json!({"url": " https://x.example/"})), false),
        (server(json!({"url": "https://x.example/a b"})), false),
        (
            server(json!({"url": "http://127.0.0.1:65535/mcp?a=1&b=/c?"})),
            true,
        ),
        (server(json!({"url": "http://127.0.0.1:65536/"})), false),
        (server(json!({"url": url, "headers": {"Host": "x"}})), false),
        (
            server(json!({"url": url, "headers": {"MCP-Session-Id": "x"}})),
            false,
        ),
        (
            server(json!({"url": url, "headers": {"aUtHoRiZaTiOn": "x"}})),
            false,
        ),
        (
            server(json!({"url": url, "headers": {"Hostname": "x"}})),
            true,
        ),
        (
            server(json!({"url": url, "headers": {"bad header": "x"}})),
            false,
        ),
        (server(json!({"url": url, "headers": {"": "x"}})), false),
        (
            server(json!({"url": url, "headers": {"X-A": "line\nbreak"}})),
            false,
        ),
        (server(json!({"url": url, "headers": {"X-A": "é"}})), false),
        (server(json!({"url": url, "headers": {"X-A": 1}})), false),
        (server(json!({"url": url, "headers": {"X-A": ""}})), true),
        (server(json!({"url": url, "headers": []})), false),
        (
            server(json!({"url": url, "auth": {"type": "basic", "token": "t"}})),
            false,
        ),
        (
            server(json!({"url": url, "auth": {"type": "bearer"}})),
            false,
        ),
        (server(json!({"url": url, "auth": {"token": "t"}})), false),
        (
            server(json!({"url": url, "auth": {"type": "bearer", "token": ""}})),
            false,
        ),
        (
            server(json!({"url": url, "auth": {"type": "bearer", "token": "a b"}})),
            false,
        ),
        (
            server(json!({"url": url, "auth": {"type": "bearer", "token": "t", "scheme": "x"}})),
            false,
        ),
        (
            server(json!({"url": url, "auth": {"type": "connection", "provider": "crm_1"}})),
            true,
        ),
        (
            server(json!({"url": url, "auth": {"type": "connection", "provider": "x".repeat(64)}})),
            true,
        ),
        (
            server(json!({"url": url, "auth": {"type": "connection", "provider": "x".repeat(65)}})),
            false,
        ),
        (
            server(json!({"url": url, "auth": {"type": "connection"}})),
            false,
        ),
        (
            server(json!({"url": url, "auth": {"type": "connection", "provider": "a-b"}})),
            false,
        ),
        (
            server(
                json!({"url": url, "auth": {"type": "connection", "provider": "p", "token": "t"}}),
            ),
            false,
        ),
        (
            server(json!({"url": url, "auth": {"type": "bearer", "token": "t", "provider": "p"}})),
            false,
        ),
        (server(json!({"url": url, "tools": "all"})), false),
        (server(json!({"url": url, "tools": Value::Null})), false),
        (server(json!({"url": url, "tools": [""]})), false),
        (server(json!({"url": url, "tools": [1]})), false),
        (
            server(json!({"url": url, "tools": ["é".repeat(128)]})),
            true,
        ),
        (
            server(json!({"url": url, "tools": ["é".repeat(129)]})),
            false,
        ),
        (server(json!({"url": url, "tools": ["a", "a"]})), true),
        (server(json!({"url": url, "needsApproval": "fetch"})), false),
        (
            server(json!({"url": url, "needsApproval": Value::Null})),
            false,
        ),
        (
            server(json!({"url": url, "needsApproval": ["fetch"]})),
            true,
        ),
        (
            with(
                "tools",
                json!({"googleSearch": {"enabled": false, "timeoutMs": 10}}),
            ),
            true,
        ),
        (
            with(
                "tools",
                json!({"googleSearch": {"enabled": false, "region": "eu"}}),
            ),
            false,
        ),
        (
            with(
                "model",
                json!({"provider": "openai", "modelId": "m", "options": {"topK": 3}}),
            ),
            false,
        ),
        (
            with("provider", json!({"openai": {"organization": "o"}})),
            false,
        ),
        (uploaded(json!({"effects": "read"})), true),
        (
            uploaded(json!({"effects": "side_effect", "async": true})),
            true,
        ),
        (uploaded(json!({"effects": "write"})), false),
        (uploaded(json!({"effects": Value::Null})), false),
        (uploaded(json!({"safeToRepeat": false})), true),
        (uploaded(json!({"safeToRepeat": true})), false),
        (
            uploaded(json!({"effects": "read", "safeToRepeat": false})),
            false,
        ),
        (
            uploaded(json!({"async": true, "effects": "idempotent", "safeToRepeat": true})),
            false,
        ),
        (
            with("tools", json!({"tavilySearch": {"effects": "idempotent"}})),
            true,
        ),
    ]
}

/// A config whose one tool is an uploaded tool set up with `setting`.
fn uploaded(setting: Value) -> Value {
    json!({
        "model": {"provider": "openai", "modelId": "m"},
        "tools": { ToolId::generate().to_string(): setting },
    })
}

#[test]
fn the_contract_and_the_config_parser_agree_on_agent_configs() {
    let contract = contract();
    let stated = validator(&contract, "AgentConfig");
    let limits = AgentLimits::default();
    for (config, taken) in config_corpus() {
        let parsed = AgentConfig::parse(&config, &limits);
        assert_eq!(
            parsed.is_ok(),
            taken,
            "the server's verdict on {config}: {parsed:?}"
        );
        let errors: Vec<String> = stated.iter_errors(&config).map(|e| e.to_string()).collect();
        assert_eq!(
            errors.is_empty(),
            taken,
            "the contract's verdict on {config}: {errors:?}"
        );
    }
}

/// Every keyword the JSON Schema 2020-12 meta-schema (and its vocabularies)
/// names.
fn meta_schema_keywords() -> BTreeSet<String> {
    use referencing::meta::*;
    [
        &*DRAFT202012,
        &*DRAFT202012_CORE,
        &*DRAFT202012_APPLICATOR,
        &*DRAFT202012_UNEVALUATED,
        &*DRAFT202012_VALIDATION,
        &*DRAFT202012_META_DATA,
        &*DRAFT202012_FORMAT_ANNOTATION,
        &*DRAFT202012_CONTENT,
    ]
    .into_iter()
    .flat_map(|meta| meta["properties"].as_object().unwrap().keys().cloned())
    .collect()
}

#[test]
fn the_contract_types_every_keyword_of_json_schema_or_says_the_server_checks_it() {
    let contract = contract();
    let keywords = &contract["components"]["schemas"]["JsonSchemaKeywords"];
    let typed = contract_fields(&contract, keywords);
    let compiled: BTreeSet<String> = keywords["x-checked-when-compiled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert!(
        typed.is_disjoint(&compiled),
        "typed and left to the compiler: {:?}",
        typed.intersection(&compiled).collect::<Vec<_>>()
    );
    let stated: BTreeSet<String> = typed.union(&compiled).cloned().collect();
    assert_eq!(
        stated,
        meta_schema_keywords(),
        "the contract's keywords (left) are not JSON Schema 2020-12's (right)"
    );
}

/// Input schemas beside whether the server takes them; none breaks a rule
/// only the compiler checks.
fn schema_corpus() -> Vec<(Value, bool)> {
    let object = |extra: Value| {
        let mut schema = json!({"type": "object"});
        for (key, value) in extra.as_object().unwrap() {
            schema[key] = value.clone();
        }
        schema
    };
    let nested = |inner: Value| object(json!({"allOf": [{"allOf": [inner]}]}));
    vec![
        (
            object(json!({"properties": {"q": {"type": "string"}}, "required": ["q"]})),
            true,
        ),
        (object(json!({})), true),
        (json!({"type": "string"}), false),
        (json!({"properties": {}}), false),
        (nested(json!({"properties": []})), false),
        (nested(json!({"properties": ["q"]})), false),
        (nested(json!({"properties": {"q": true}})), true),
        (nested(json!({"required": "q"})), false),
        (nested(json!({"required": ["q", "q"]})), false),
        (nested(json!({"minLength": -1})), false),
        (nested(json!({"minLength": 1.0})), true),
        (nested(json!({"minLength": 1.5})), false),
        (nested(json!({"type": "thing"})), false),
        (nested(json!({"type": []})), false),
        (nested(json!({"type": ["string", "string"]})), false),
        (nested(json!({"type": ["string", "null"]})), true),
        (object(json!({"minProperties": -1})), false),
        (object(json!({"maxProperties": 2})), true),
        (object(json!({"oneOf": []})), false),
        (object(json!({"oneOf": [true, {"type": "object"}]})), true),
        (object(json!({"if": 3})), false),
        (
            object(json!({"if": {"required": ["a"]}, "then": false, "else": true})),
            true,
        ),
        (object(json!({"$defs": {"d": {"type": "thing"}}})), false),
        (object(json!({"$defs": {"d": {"type": "string"}}})), true),
        (object(json!({"definitions": {"d": 3}})), false),
        (object(json!({"multipleOf": 0})), false),
        (object(json!({"multipleOf": 0.5})), true),
        (
            object(json!({"dependentRequired": {"a": ["b", "b"]}})),
            false,
        ),
        (object(json!({"dependentRequired": {"a": ["b"]}})), true),
        (object(json!({"dependentSchemas": {"a": 1}})), false),
        (
            object(json!({"dependencies": {"a": ["b"], "c": {"required": ["d"]}}})),
            true,
        ),
        (object(json!({"dependencies": {"a": 3}})), false),
        (object(json!({"enum": 3})), false),
        (object(json!({"examples": {}})), false),
        (object(json!({"deprecated": "yes"})), false),
        (object(json!({"readOnly": true, "writeOnly": false})), true),
        (object(json!({"contentSchema": 5})), false),
        (
            object(json!({"contentEncoding": "base64", "contentMediaType": "text/plain"})),
            true,
        ),
        (object(json!({"unevaluatedProperties": 3})), false),
        (object(json!({"unevaluatedProperties": false})), true),
        (object(json!({"prefixItems": []})), false),
        (object(json!({"items": [{"type": "string"}]})), false),
        (
            object(json!({"contains": {"const": 1}, "minContains": 0, "maxContains": 2})),
            true,
        ),
        (object(json!({"minContains": -1})), false),
        (object(json!({"propertyNames": 1})), false),
        (object(json!({"$comment": 5})), false),
        (object(json!({"format": "nonsense-format"})), true),
        (object(json!({"format": 3})), false),
        (
            object(json!({"title": "t", "description": "d", "default": {}})),
            true,
        ),
        (object(json!({"exclusiveMinimum": true})), false),
        (object(json!({"x-vendor": {"anything": [1, "two"]}})), true),
    ]
}

#[test]
fn the_contract_and_the_server_agree_on_input_schemas() {
    let contract = contract();
    let stated = validator(&contract, "InputSchema");
    let limits = ToolLimits::default();
    for (schema, taken) in schema_corpus() {
        let parsed = InputSchema::parse(schema.clone(), &limits);
        assert_eq!(
            parsed.is_ok(),
            taken,
            "the server's verdict on {schema}: {parsed:?}"
        );
        let errors: Vec<String> = stated.iter_errors(&schema).map(|e| e.to_string()).collect();
        assert_eq!(
            errors.is_empty(),
            taken,
            "the contract's verdict on {schema}: {errors:?}"
        );
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_mcp_routes_are_in_the_contract_and_answer_as_it_says(pool: sqlx::PgPool) {
    use toolserver_api::mcp::{MCP_PATH, METADATA_PATH};

    let contract = contract();
    let app = crate::app::spawn_live_app(pool).await;
    let operations = [
        (MCP_PATH.to_owned(), "post", "JsonRpcResponse"),
        (METADATA_PATH.to_owned(), "get", "ProtectedResourceMetadata"),
        (
            format!("{METADATA_PATH}{MCP_PATH}"),
            "get",
            "ProtectedResourceMetadata",
        ),
    ];
    for (path, method, answer) in operations {
        let operation = &contract["paths"][&path][method];
        assert!(operation.is_object(), "no {method} {path} in the contract");
        let documented = &operation["responses"]["200"]["content"]["application/json"]["schema"];
        assert_eq!(
            documented["$ref"],
            format!("#/components/schemas/{answer}"),
            "{method} {path}"
        );
        let request = match method {
            "post" => app
                .client
                .post(format!("{}{path}", app.base()))
                .bearer_auth(crate::support::token(crate::support::ACCOUNT_A))
                .header("accept", "application/json, text/event-stream")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
            _ => app.client.get(format!("{}{path}", app.base())),
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        let errors: Vec<String> = validator(&contract, answer)
            .iter_errors(&body)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} answered {body}: {errors:?}"
        );
    }
    let unauthenticated = app
        .client
        .post(format!("{}{MCP_PATH}", app.base()))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    assert!(
        contract["paths"][MCP_PATH]["post"]["responses"]["401"]["headers"]["WWW-Authenticate"]
            .is_object()
    );
}
