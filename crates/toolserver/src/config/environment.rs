//! `TOOLSERVER_*` variables that are no setting. A misspelt or retired
//! variable would otherwise be ignored without a word, and the setting it
//! meant left at its default; the long-running commands refuse to start
//! with one instead.

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::Command;

/// The prefix of the server's variables.
pub const PREFIX: &str = "TOOLSERVER_";

/// Variables of other programs under the same prefix, which the server
/// leaves alone, with what reads them.
pub const OTHER_PROGRAMS: &[(&str, &str)] = &[
    (
        "TOOLSERVER_URL",
        "The server's base URL, for the `toolserver-tools` command (`clients/cli`).",
    ),
    (
        "TOOLSERVER_TOKEN",
        "The bearer token the `toolserver-tools` command sends.",
    ),
    (
        "TOOLSERVER_CALLBACK_TIMEOUT_MS",
        "Read by the runner worker, in its own environment (a runner image): \
         milliseconds one attempt at posting a detached call's outcome may \
         take (default 10000); attempts go on with backoff for \
         `TOOLSERVER_COMPLETION_RETRY_MS`.",
    ),
];

/// A `TOOLSERVER_*` variable that is no setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// Its name.
    pub name: String,
    /// The setting with the closest name, when one is close.
    pub closest: Option<String>,
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not a setting", self.name)?;
        if let Some(closest) = &self.closest {
            write!(f, "; did you mean {closest}?")?;
        }
        f.write_str(" (every setting is in docs/configuration.md)")
    }
}

/// Every variable some subcommand of `command` reads.
pub fn settings(command: &Command) -> BTreeSet<String> {
    command
        .get_subcommands()
        .flat_map(Command::get_arguments)
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect()
}

/// The `TOOLSERVER_*` names among `vars` that neither a subcommand of
/// `command` nor another program reads.
pub fn unknown(
    command: &Command,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<Unknown> {
    let settings = settings(command);
    let mut unknown: Vec<Unknown> = vars
        .into_iter()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with(PREFIX))
        .filter(|name| !settings.contains(name))
        .filter(|name| !OTHER_PROGRAMS.iter().any(|(other, _)| other == name))
        .map(|name| Unknown {
            closest: closest(&name, &settings),
            name,
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown
}

/// The setting whose name is closest to `name`, when it is close: a few
/// edits for each few characters after the prefix.
fn closest(name: &str, settings: &BTreeSet<String>) -> Option<String> {
    let allowed = (name.len().saturating_sub(PREFIX.len()) / 3).max(2);
    settings
        .iter()
        .map(|setting| (edits(name, setting), setting))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, setting)| setting.clone())
}

/// The fewest single-character insertions, deletions and substitutions
/// that turn `from` into `to`.
fn edits(from: &str, to: &str) -> usize {
    let to: Vec<char> = to.chars().collect();
    let mut previous: Vec<usize> = (0..=to.len()).collect();
    for (i, a) in from.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, b) in to.iter().enumerate() {
            let substitution = previous[j] + usize::from(a != *b);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[to.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(OsString, OsString)> {
        names
            .iter()
            .map(|name| (OsString::from(name), OsString::from("1")))
            .collect()
    }

    #[test]
    fn only_unknown_names_under_the_prefix_are_reported_with_the_closest_setting() {
        let command = crate::config::command();
        let found = unknown(
            &command,
            vars(&[
                "TOOLSERVER_JOB_CLAIM_SECS",
                "TOOLSERVER_JOB_CLAIM_MS",
                "TOOLSERVER_EGRESS_LISTEN",
                "TOOLSERVER_TOKEN",
                "TOOLSERVER_NOTHING_LIKE_ANY_SETTING_AT_ALL",
                "DATABASE_URL",
                "PATH",
            ]),
        );
        assert_eq!(
            found,
            [
                Unknown {
                    name: "TOOLSERVER_JOB_CLAIM_SECS".into(),
                    closest: Some("TOOLSERVER_JOB_CLAIM_MS".into()),
                },
                Unknown {
                    name: "TOOLSERVER_NOTHING_LIKE_ANY_SETTING_AT_ALL".into(),
                    closest: None,
                },
            ]
        );
    }

    #[test]
    fn edits_count_insertions_deletions_and_substitutions() {
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
        assert_eq!(edits("TOOLSERVER_BIND", "TOOLSERVER_BIND"), 0);
    }
}
