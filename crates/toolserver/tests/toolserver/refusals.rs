//! The binary refuses bad settings at start: a value of each kind a setting
//! does not take, settings that cannot work together, and a `TOOLSERVER_*`
//! variable that is no setting each end it with a non-zero status and a
//! message naming the variable and what it takes, before it binds or
//! connects to anything (its database here is a listener no one may reach,
//! its data directory must stay empty). A secret's value is never printed.

use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// What the binary said when started with `args` and `env`.
struct Refusal {
    status: Option<i32>,
    stderr: String,
}

/// Runs `toolserver <args>` with only `env` (besides `PATH` and `HOME`),
/// a database URL pointing at a listener of this test and an empty data
/// directory, and checks it neither connected there nor wrote anything.
fn refusal(args: &[&str], env: &[(&str, &str)]) -> Refusal {
    let database = TcpListener::bind("127.0.0.1:0").unwrap();
    database.set_nonblocking(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let started = Instant::now();
    let Output { status, stderr, .. } = Command::new(env!("CARGO_BIN_EXE_toolserver"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", std::env::var("HOME").unwrap())
        .env(
            "DATABASE_URL",
            format!(
                "postgres://postgres@{}/refused",
                database.local_addr().unwrap()
            ),
        )
        .env("TOOLSERVER_DATA_DIR", &data_dir)
        .env("TOOLSERVER_BIND", "127.0.0.1:0")
        .env("TOOLSERVER_METRICS_BIND", "off")
        .env("TOOLSERVER_EGRESS_LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{args:?} {env:?} took {:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    assert!(
        database.accept().is_err(),
        "{args:?} {env:?} connected to its database first: {stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&data_dir).unwrap().count(),
        0,
        "{args:?} {env:?} wrote to its data directory first: {stderr}"
    );
    Refusal {
        status: status.code(),
        stderr,
    }
}

/// Checks that `serve` with `name=value` stops, naming `name` and saying
/// `takes`.
fn refuses(name: &str, value: &str, takes: &str) -> String {
    let Refusal { status, stderr } = refusal(&["serve"], &[(name, value)]);
    assert_eq!(status, Some(2), "{name}={value}: {stderr}");
    assert!(
        stderr.contains(name) && stderr.contains(takes),
        "{name}={value} should name {name} and say it takes {takes:?}: {stderr}"
    );
    stderr
}

#[test]
fn a_value_of_each_kind_a_setting_does_not_take_stops_the_server() {
    refuses(
        "TOOLSERVER_USAGE_FLUSH_MS",
        "99",
        "a whole number, at least 100",
    );
    refuses(
        "TOOLSERVER_STREAM_WRITERS",
        "65",
        "a whole number from 1 to 64",
    );
    refuses(
        "TOOLSERVER_JOB_CLAIM_MS",
        "ten",
        "a whole number, at least 300",
    );
    refuses("TOOLSERVER_REQUEST_TIMEOUT_SECS", "30s", "a whole number");
    refuses(
        "TOOLSERVER_K8S_CHANNEL_PORT",
        "70000",
        "a whole number up to 65535",
    );
    refuses("TOOLSERVER_BUNDLE_STORE", "gcs", "one of `fs`, `s3`");
    refuses(
        "TOOLSERVER_JWT_ALGORITHM",
        "none",
        "one of `HS256`, `RS256`, `ES256`",
    );
    refuses(
        "TOOLSERVER_PUBLIC_URL",
        "toolserver.example.com",
        "an absolute URL",
    );
    refuses(
        "TOOLSERVER_BIND",
        "localhost:8080",
        "an IP address and port",
    );
    refuses(
        "TOOLSERVER_METRICS_BIND",
        "everywhere",
        "an IP address and port, or `off`",
    );
    refuses(
        "TOOLSERVER_OUTBOUND_ALLOW_PRIVATE",
        "yes",
        "one of `true`, `false`",
    );
    refuses(
        "TOOLSERVER_STREAM_RECORDING",
        "on",
        "one of `true`, `false`",
    );
    refuses(
        "TOOLSERVER_MCP_AUTHORIZATION_SERVERS",
        "https://as.example.com,issuer",
        "a `,`-separated list of absolute http(s) URLs",
    );
    refuses(
        "TOOLSERVER_RUNNER_EGRESS_TEST_HOSTS",
        "api.example.com",
        "`name=ip` pairs",
    );
}

#[test]
fn a_secret_too_short_stops_the_server_without_showing_it() {
    let stderr = refuses(
        "TOOLSERVER_OPERATOR_KEY",
        "short-opkey",
        "text of at least 16 bytes",
    );
    assert!(!stderr.contains("short-opkey"), "{stderr}");
    let stderr = refuses(
        "TOOLSERVER_EGRESS_TOKEN_KEY",
        "egress-key-of-31-bytes-00000000",
        "text of at least 32 bytes",
    );
    assert!(!stderr.contains("egress-key-of-31"), "{stderr}");
    let stderr = refuses(
        "TOOLSERVER_SECRETS_KEY",
        "not-hex-at-all",
        "64 hex characters",
    );
    assert!(!stderr.contains("not-hex-at-all"), "{stderr}");
    let stderr = refuses("TOOLSERVER_JWT_SECRET", "", "non-empty text");
    assert!(stderr.contains("not shown"), "{stderr}");
}

#[test]
fn settings_that_cannot_work_together_stop_the_server() {
    let Refusal { status, stderr } = refusal(
        &["serve"],
        &[
            ("TOOLSERVER_STREAM_POLL_MS", "6000"),
            ("TOOLSERVER_REQUEST_TIMEOUT_SECS", "10"),
            ("TOOLSERVER_TURN_CHUNKS", "nats"),
        ],
    );
    assert_eq!(status, Some(2), "{stderr}");
    for expected in [
        "TOOLSERVER_STREAM_ALIVE_MS (10000) must be at least twice TOOLSERVER_STREAM_POLL_MS (6000)",
        "TOOLSERVER_STREAM_RESUME_HOLD_MS (25000) must be at most TOOLSERVER_REQUEST_TIMEOUT_SECS",
        "TOOLSERVER_TURN_CHUNKS=nats needs TOOLSERVER_NATS_URL",
    ] {
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
}

#[test]
fn a_variable_that_is_no_setting_stops_every_long_running_command() {
    for command in ["serve", "worker", "egress-proxy"] {
        let Refusal { status, stderr } = refusal(
            &[command],
            &[
                ("TOOLSERVER_JOB_CLAIM_SECS", "10"),
                ("TOOLSERVER_EGRESS_TOKEN_KEY", &"k".repeat(32)),
                ("TOOLSERVER_TOKEN", "a client's variable, left alone"),
            ],
        );
        assert_eq!(status, Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains(
                "TOOLSERVER_JOB_CLAIM_SECS is not a setting; did you mean TOOLSERVER_JOB_CLAIM_MS?"
            ),
            "{command}: {stderr}"
        );
        assert!(!stderr.contains("TOOLSERVER_TOKEN "), "{command}: {stderr}");
    }
}

#[test]
fn a_flag_is_named_as_given_and_a_required_setting_by_its_variable() {
    let Refusal { status, stderr } = refusal(&["serve", "--usage-flush-ms", "5"], &[]);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "--usage-flush-ms does not take \"5\": it takes a whole number, at least 100"
        ),
        "{stderr}"
    );
    let Refusal { status, stderr } = refusal(&["egress-proxy"], &[]);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(
        stderr.contains("required but not set: TOOLSERVER_EGRESS_TOKEN_KEY"),
        "{stderr}"
    );
}
