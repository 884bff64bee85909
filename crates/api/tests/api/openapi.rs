//! `openapi.yaml` must be exactly the document the routers generate; change
//! a route or a schema without regenerating it (`make openapi`) and this fails.

#[test]
fn openapi_yaml_matches_the_routes() {
    let generated = toolserver_api::contract_yaml().unwrap();
    toolserver_testsupport::drift::assert_committed("openapi.yaml", &generated, "make openapi");
}

#[test]
fn every_tool_route_requires_the_bearer_scheme() {
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&toolserver_api::contract_yaml().unwrap()).unwrap();
    let paths = doc["paths"].as_mapping().unwrap();
    let mut checked = 0;
    for (path, item) in paths {
        let path = path.as_str().unwrap();
        if !path.starts_with("/accounts/") {
            continue;
        }
        for (method, operation) in item.as_mapping().unwrap() {
            let security = &operation["security"];
            assert!(
                security.as_sequence().is_some_and(|s| !s.is_empty()),
                "{method:?} {path} has no security requirement"
            );
            checked += 1;
        }
    }
    assert!(checked >= 7, "expected the tool routes, saw {checked}");
    assert!(doc["components"]["securitySchemes"]["bearer"].is_mapping());
}

#[test]
fn the_published_base_url_pattern_is_the_one_the_server_enforces() {
    let contract = toolserver_api::contract().unwrap();
    assert_eq!(
        contract["components"]["schemas"]["BaseUrl"]["pattern"],
        toolserver_domain::agent::config::BASE_URL_PATTERN
    );
    assert_eq!(
        contract["components"]["schemas"]["McpServer"]["properties"]["url"]["pattern"],
        toolserver_domain::agent::mcp::MCP_URL_PATTERN
    );
}
