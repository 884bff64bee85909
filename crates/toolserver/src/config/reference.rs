//! The settings reference, `docs/configuration.md`, generated from the
//! settings' declarations: every variable with its default, what it
//! accepts and its help, grouped by concern as `--help` groups them.

use std::fmt::Write;

use clap::{Arg, Command, CommandFactory};

use super::command_line::Cli;
use super::{environment, parse};

/// The reference in Markdown (`toolserver settings-docs`).
pub fn markdown() -> String {
    let command = Cli::command();
    let mut out = String::from(INTRODUCTION);
    let serve = subcommand(&command, "serve");
    let mut headings: Vec<&str> = Vec::new();
    for arg in settings(serve) {
        let heading = arg.get_help_heading().unwrap_or("Other");
        if !headings.contains(&heading) {
            headings.push(heading);
        }
    }
    for heading in headings {
        let _ = write!(out, "\n## {heading}\n\n");
        table(
            &mut out,
            settings(serve).filter(|arg| arg.get_help_heading().unwrap_or("Other") == heading),
        );
    }
    let proxy = subcommand(&command, "egress-proxy");
    out.push_str(EGRESS_PROXY);
    table(
        &mut out,
        settings(proxy).filter(|arg| !settings(serve).any(|other| same(arg, other))),
    );
    out.push_str(OTHER_PROGRAMS);
    for (name, meaning) in environment::OTHER_PROGRAMS {
        let _ = writeln!(out, "| `{name}` | {} |", cell(meaning));
    }
    out
}

const INTRODUCTION: &str = "\
# Configuration

<!-- Generated from the settings' declarations in crates/toolserver/src/config/
     by `toolserver settings-docs` (`make docs`); edit those, not this file. -->

Every setting of `toolserver serve` is an environment variable, or the
equivalent flag (`toolserver serve --help` lists them); `toolserver worker`
takes the same settings, `toolserver migrate` the database ones.

The server refuses to start, naming the variable and what it accepts, on a
value a setting does not accept, on settings that cannot work together, and
on a `TOOLSERVER_*` variable that is no setting (a misspelt name would
otherwise leave its setting at the default without a word). Secret values
are never printed.
";

const EGRESS_PROXY: &str = "
## `toolserver egress-proxy`

The egress proxy Kubernetes runner pods share takes these, besides the
[Runner egress](#runner-egress) and [Logs and traces](#logs-and-traces)
settings.

";

const OTHER_PROGRAMS: &str = "
## Variables of other programs

These share the prefix; the server leaves them alone.

| variable | meaning |
|---|---|
";

/// The subcommand `name` of `command`.
fn subcommand<'a>(command: &'a Command, name: &str) -> &'a Command {
    command
        .get_subcommands()
        .find(|sub| sub.get_name() == name)
        .unwrap_or(command)
}

/// The arguments of `command` that are settings (read from a variable).
fn settings(command: &Command) -> impl Iterator<Item = &Arg> + '_ {
    command
        .get_arguments()
        .filter(|arg| arg.get_env().is_some())
}

/// Whether two arguments are the same setting, declared once and used by
/// two subcommands.
fn same(a: &Arg, b: &Arg) -> bool {
    a.get_env() == b.get_env() && a.get_help_heading() == b.get_help_heading()
}

/// A table of `args`.
fn table<'a>(out: &mut String, args: impl Iterator<Item = &'a Arg>) {
    out.push_str("| variable | default | accepts | meaning |\n|---|---|---|---|\n");
    for arg in args {
        let env = arg
            .get_env()
            .map(|env| env.to_string_lossy())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| `{env}` | {} | {} | {} |",
            default(arg),
            cell(&accepts(arg)),
            cell(&help(arg)),
        );
    }
}

/// The default of `arg`, as it is written.
fn default(arg: &Arg) -> String {
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    if values.is_empty() {
        return "unset".to_owned();
    }
    let delimiter = arg
        .get_value_delimiter()
        .map(String::from)
        .unwrap_or_default();
    format!("`{}`", values.join(&delimiter))
}

/// What `arg` accepts, and that it is secret when it is.
fn accepts(arg: &Arg) -> String {
    let accepts = parse::accepts(arg);
    match arg.is_hide_env_values_set() {
        true => format!("{accepts}; secret, never printed"),
        false => accepts,
    }
}

/// The help of `arg`, on one line.
fn help(arg: &Arg) -> String {
    let help = arg.get_long_help().or_else(|| arg.get_help());
    help.map(ToString::to_string).unwrap_or_default()
}

/// `text` fit for a table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
