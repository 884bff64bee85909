//! The settings reference, `docs/configuration.md`, is what the code
//! generates, and every environment variable that `docker-compose.yml` sets
//! is a real setting of the server.

use clap::Parser;
use toolserver::config::{self, environment};
use toolserver::Cli;

fn repo_file(name: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_owned() + name)
        .unwrap_or_else(|err| panic!("reading {name}: {err}"))
}

#[test]
fn the_settings_reference_is_what_the_code_generates() {
    let generated = config::reference::markdown();
    toolserver_testsupport::drift::assert_committed(
        "docs/configuration.md",
        &generated,
        "make docs",
    );
}

#[test]
fn the_settings_reference_lists_every_setting() {
    let reference = repo_file("docs/configuration.md");
    let missing: Vec<String> = environment::settings(&config::command())
        .into_iter()
        .filter(|name| !reference.contains(&format!("| `{name}` |")))
        .collect();
    assert!(missing.is_empty(), "not in the reference: {missing:?}");
}

#[test]
fn compose_sets_only_real_settings() {
    let compose: serde_yaml::Value =
        serde_yaml::from_str(&repo_file("docker-compose.yml")).unwrap();
    let environment = compose["services"]["toolserver"]["environment"]
        .as_mapping()
        .expect("services.toolserver.environment is a mapping");
    let known = environment::settings(&config::command());
    assert!(!environment.is_empty());
    for key in environment.keys() {
        let key = key.as_str().unwrap();
        assert!(
            known.contains(key),
            "docker-compose.yml sets {key}, which the server does not read"
        );
    }
    let depends = &compose["services"]["toolserver"]["depends_on"];
    assert!(depends["postgres"].is_mapping() && depends["s3"].is_mapping());
}

#[test]
fn defaults_parse_without_any_environment() {
    let cli = Cli::try_parse_from(["toolserver", "serve"]);
    assert!(cli.is_ok(), "{:?}", cli.err());
}
