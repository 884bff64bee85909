//! Every environment variable that `docker-compose.yml` (and the Kubernetes
//! manifests, once they exist) set must be a real setting of the server, and
//! the README must document every setting.

use std::collections::BTreeSet;

use clap::{CommandFactory, Parser};
use toolserver::Cli;

fn repo_file(name: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_owned() + name)
        .unwrap_or_else(|err| panic!("reading {name}: {err}"))
}

/// The environment variables `toolserver serve` and `toolserver
/// egress-proxy` read.
fn settings() -> BTreeSet<String> {
    let command = Cli::command();
    ["serve", "egress-proxy"]
        .into_iter()
        .flat_map(|name| command.find_subcommand(name).unwrap().get_arguments())
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn compose_sets_only_real_settings() {
    let compose: serde_yaml::Value =
        serde_yaml::from_str(&repo_file("docker-compose.yml")).unwrap();
    let environment = compose["services"]["toolserver"]["environment"]
        .as_mapping()
        .expect("services.toolserver.environment is a mapping");
    let known = settings();
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
fn readme_documents_every_setting() {
    let readme = repo_file("README.md");
    let missing: Vec<_> = settings()
        .into_iter()
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md does not document: {missing:?}"
    );
}

#[test]
fn defaults_parse_without_any_environment() {
    let cli = Cli::try_parse_from(["toolserver", "serve"]);
    assert!(cli.is_ok(), "{:?}", cli.err());
}
