//! Typed configuration, read from environment variables (or the equivalent
//! command-line flags), one module per concern. Each setting is declared
//! once, on its field: its variable, its default (taken from the crate that
//! uses it where that crate has one), what it accepts and its help (the doc
//! comment). `docs/configuration.md` is generated from these declarations
//! ([`reference`]).
//!
//! A value a setting does not accept, a combination of settings that cannot
//! work together ([`checks`]), and a `TOOLSERVER_*` variable that is no
//! setting ([`environment`]) stop the program at start, before it binds or
//! connects to anything, with a message naming the variable and what it
//! accepts ([`errors`]).

mod accounts;
mod agents;
mod auth;
mod breaker;
mod bundles;
pub mod checks;
pub mod command_line;
mod cors;
mod database;
mod egress;
pub mod environment;
pub mod errors;
mod kubernetes;
mod ledger;
mod lifecycle;
mod limits;
mod mcp;
pub mod parse;
pub mod reference;
mod runners;
mod server;
mod streams;
mod telemetry;
pub mod units;
mod webhooks;

use clap::{Command, CommandFactory, FromArgMatches};

pub use accounts::AccountsConfig;
pub use agents::AgentsConfig;
pub use auth::{AuthConfig, JwtAlgorithm};
pub use breaker::BreakerConfig;
pub use bundles::{BundleBackend, BundleConfig};
pub use cors::CorsConfig;
pub use database::DatabaseConfig;
pub use egress::{EgressConfig, EgressProxyConfig};
pub use kubernetes::{CacheVolumeKind, ChannelKind, KubernetesConfig};
pub use ledger::LedgerConfig;
pub use lifecycle::LifecycleConfig;
pub use limits::LimitsConfig;
pub use mcp::McpConfig;
pub use runners::{ExecutorKind, RunnerConfig, RunnerIsolation};
pub use server::ServeConfig;
pub use streams::{StreamsConfig, TurnChunks};
pub use telemetry::{LogConfig, LogFormat};
pub use webhooks::WebhooksConfig;

use command_line::Cli;

/// The command line, each setting's help ending with what it accepts.
pub fn command() -> Command {
    Cli::command().mut_subcommands(|sub| sub.mut_args(describe))
}

/// `arg` with what it accepts in its help (and its parser's description
/// no longer listed as a possible value).
fn describe(arg: clap::Arg) -> clap::Arg {
    if !arg.get_action().takes_values() || arg.get_env().is_none() {
        return arg;
    }
    let accepts = parse::accepts(&arg);
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    let long_help = arg.get_long_help().map(ToString::to_string);
    let arg = arg
        .hide_possible_values(true)
        .help(format!("{help} [accepts: {accepts}]"));
    match long_help {
        Some(long) => arg.long_help(format!("{long}\n\n[accepts: {accepts}]")),
        None => arg,
    }
}

/// Parses the process's command line and environment; a bad value, a
/// combination that cannot work, or an unknown `TOOLSERVER_*` variable ends
/// the process with a message that names the variable.
pub fn parse_or_exit() -> Cli {
    let mut command = command();
    let args: Vec<_> = std::env::args_os().collect();
    let matches = match command.try_get_matches_from_mut(&args) {
        Ok(matches) => matches,
        Err(err) => errors::explain(err, &command, &args).exit(),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    let problems = checks::check(&cli, &command, std::env::vars_os());
    if !problems.is_empty() {
        errors::refuse(&problems).exit();
    }
    cli
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// A value each secret setting accepts, told apart from every other.
    const SECRETS: &[(&str, &str)] = &[
        ("TOOLSERVER_JWT_SECRET", "jwt-secret-f0f1f2"),
        ("TOOLSERVER_BUNDLE_URL_SECRET", "bundle-url-secret-e0e1e2"),
        ("TOOLSERVER_S3_SECRET_ACCESS_KEY", "s3-secret-d0d1d2"),
        ("TOOLSERVER_OPENAI_API_KEY", "sk-openai-c0c1c2"),
        ("TOOLSERVER_ANTHROPIC_API_KEY", "sk-ant-e0e1e2"),
        ("TOOLSERVER_GOOGLE_API_KEY", "goog-f0f1f2"),
        ("TOOLSERVER_TAVILY_API_KEY", "tvly-b0b1b2"),
        ("TOOLSERVER_OPERATOR_KEY", "operator-key-a0a1a2a3"),
        (
            "TOOLSERVER_EGRESS_TOKEN_KEY",
            "egress-token-key-909192939495969798",
        ),
        (
            "TOOLSERVER_SECRETS_KEY",
            "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7",
        ),
    ];

    #[test]
    fn every_secret_setting_hides_its_value() {
        let command = command();
        let hidden: std::collections::BTreeSet<String> = command
            .get_subcommands()
            .flat_map(Command::get_arguments)
            .filter(|arg| arg.is_hide_env_values_set())
            .filter_map(|arg| arg.get_env())
            .map(|env| env.to_string_lossy().into_owned())
            .collect();
        let listed = SECRETS.iter().map(|(name, _)| (*name).to_owned()).collect();
        assert_eq!(hidden, listed, "SECRETS must name every secret setting");
    }

    #[test]
    fn no_secret_shows_in_a_parsed_config() {
        for (name, value) in SECRETS {
            std::env::set_var(name, value);
        }
        let parsed = ["serve", "worker", "egress-proxy", "migrate"].map(|sub| {
            Cli::try_parse_from(["toolserver", sub]).map(|cli| format!("{:?}", cli.command))
        });
        let token = Cli::try_parse_from(["toolserver", "token", "--account", "acct"]);
        for (name, _) in SECRETS {
            std::env::remove_var(name);
        }
        let token = token.unwrap();
        let command_line::Command::Token(args) = &token.command else {
            panic!("{token:?}");
        };
        assert_eq!(
            args.auth.jwt_secret.as_ref().map(|key| key.expose()),
            Some(SECRETS[0].1),
            "the secrets were read"
        );
        let mut shown: Vec<String> = parsed.into_iter().map(Result::unwrap).collect();
        shown.push(format!("{token:?}"));
        for text in &shown {
            for (name, value) in SECRETS {
                assert!(!text.contains(value), "{name} shows in {text}");
            }
        }
        assert!(
            shown[0].contains("operator_key: Some([redacted])"),
            "{}",
            shown[0]
        );
    }
}
