//! Settings each fine on its own that cannot work together, and variables
//! that are no setting: found after parsing, before anything is bound or
//! connected to.

use std::ffi::OsString;

use clap::Command;

use super::command_line::{self as cli, Cli};
use super::{environment, BundleBackend, ExecutorKind, ServeConfig, TurnChunks};

/// What is wrong with `cli`'s settings, a sentence each: for the
/// long-running commands, `TOOLSERVER_*` variables among `vars` that are no
/// setting of `command`, and combinations `serve` and `worker` cannot run
/// with.
pub fn check(
    cli: &Cli,
    command: &Command,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let serving = match &cli.command {
        cli::Command::Serve(config) | cli::Command::Worker(config) => Some(config),
        cli::Command::EgressProxy(_) => None,
        _ => return problems,
    };
    let unknown = environment::unknown(command, vars);
    problems.extend(unknown.iter().map(ToString::to_string));
    if let Some(config) = serving {
        problems.extend(serve(config));
    }
    problems
}

/// Combinations of `serve` settings that cannot work.
pub fn serve(config: &ServeConfig) -> Vec<String> {
    let streams = &config.streams;
    let mut problems = Vec::new();
    if streams.stream_alive_ms < streams.stream_poll_ms.saturating_mul(2) {
        problems.push(format!(
            "TOOLSERVER_STREAM_ALIVE_MS ({}) must be at least twice TOOLSERVER_STREAM_POLL_MS ({})",
            streams.stream_alive_ms, streams.stream_poll_ms
        ));
    }
    let hold_ceiling_ms = config
        .limits
        .request_timeout_secs
        .saturating_sub(1)
        .saturating_mul(1000);
    if streams.stream_resume_hold_ms > hold_ceiling_ms {
        problems.push(format!(
            "TOOLSERVER_STREAM_RESUME_HOLD_MS ({}) must be at most TOOLSERVER_REQUEST_TIMEOUT_SECS \
             less a second ({hold_ceiling_ms} ms)",
            streams.stream_resume_hold_ms
        ));
    }
    if streams.turn_chunks == Some(TurnChunks::Nats) && streams.nats_url.is_none() {
        problems.push("TOOLSERVER_TURN_CHUNKS=nats needs TOOLSERVER_NATS_URL".to_owned());
    }
    let bundles = &config.bundles;
    if bundles.bundle_store == BundleBackend::S3 {
        if bundles.s3_bucket.is_none() {
            problems.push("TOOLSERVER_BUNDLE_STORE=s3 needs TOOLSERVER_S3_BUCKET".to_owned());
        }
        if bundles.s3_access_key_id.is_some() != bundles.s3_secret_access_key.is_some() {
            problems.push(
                "set both TOOLSERVER_S3_ACCESS_KEY_ID and TOOLSERVER_S3_SECRET_ACCESS_KEY, or \
                 neither"
                    .to_owned(),
            );
        }
    }
    let k8s = &config.runners.kubernetes;
    if config.runners.executor == ExecutorKind::Kubernetes
        && k8s.k8s_egress_proxy.is_some()
        && k8s.egress_token_key.is_none()
    {
        problems.push(
            "TOOLSERVER_K8S_EGRESS_PROXY needs TOOLSERVER_EGRESS_TOKEN_KEY, the key the proxy \
             holds"
                .to_owned(),
        );
    }
    problems
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn serve_with(args: &[&str]) -> ServeConfig {
        let argv = ["toolserver", "serve"].iter().chain(args).copied();
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(cli::Command::Serve(config)) => *config,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_defaults_work_together() {
        assert_eq!(serve(&serve_with(&[])), Vec::<String>::new());
    }

    #[test]
    fn a_stream_must_live_for_two_polls() {
        let problems = serve(&serve_with(&["--stream-poll-ms", "5001"]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("TOOLSERVER_STREAM_ALIVE_MS (10000)"));
        assert!(serve(&serve_with(&["--stream-poll-ms", "5000"])).is_empty());
    }

    #[test]
    fn a_resume_holds_less_than_the_request_timeout() {
        let problems = serve(&serve_with(&["--request-timeout-secs", "20"]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("TOOLSERVER_REQUEST_TIMEOUT_SECS less a second (19000 ms)"),
            "{problems:?}"
        );
        assert!(serve(&serve_with(&["--request-timeout-secs", "26"])).is_empty());
    }

    #[test]
    fn stores_and_proxies_need_what_they_name() {
        let s3 = serve(&serve_with(&[
            "--bundle-store",
            "s3",
            "--s3-access-key-id",
            "id",
        ]));
        assert_eq!(s3.len(), 2, "{s3:?}");
        let nats = serve(&serve_with(&["--turn-chunks", "nats"]));
        assert_eq!(
            nats,
            ["TOOLSERVER_TURN_CHUNKS=nats needs TOOLSERVER_NATS_URL"]
        );
        let proxy = serve(&serve_with(&[
            "--executor",
            "kubernetes",
            "--k8s-egress-proxy",
            "egress:3128",
        ]));
        assert_eq!(proxy.len(), 1, "{proxy:?}");
    }
}
