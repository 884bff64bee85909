//! `docs/routes.md` must be exactly the page `toolserver routes-docs`
//! renders from the OpenAPI document the routers generate; change a route
//! without regenerating it (`make routes-docs`) and this fails.

#[test]
fn routes_md_matches_the_routes() {
    let generated = toolserver::routes_docs::markdown().unwrap();
    toolserver_testsupport::drift::assert_committed(
        "docs/routes.md",
        &generated,
        "make routes-docs",
    );
}

#[test]
fn routes_md_lists_every_operation_of_the_contract() {
    let contract = toolserver_api::contract().unwrap();
    let page = toolserver::routes_docs::markdown().unwrap();
    let mut operations = 0;
    for (path, item) in contract["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let row = format!("| `{}` | `{path}` |", method.to_uppercase());
            assert!(page.contains(&row), "docs/routes.md has no row {row}");
            operations += 1;
        }
    }
    let rows = page.lines().filter(|line| line.starts_with("| `")).count();
    assert_eq!(rows, operations, "one row per operation");
}
