//! Start-up errors that name the setting: a value a setting does not
//! accept is reported by its variable (or its flag, when given on the
//! command line) with what the setting accepts, never with a secret's
//! value.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command};

use super::parse;

/// `err` in terms of the settings involved, when it is about a setting's
/// value; any other error (help, version, an unknown flag) as it is.
pub fn explain(err: clap::Error, command: &Command, args: &[OsString]) -> clap::Error {
    let mut command = command.clone();
    command.build();
    let named = |display: &str| setting(&command, display);
    let message = match (err.kind(), err.get(ContextKind::InvalidArg)) {
        (ErrorKind::ValueValidation | ErrorKind::InvalidValue, Some(ContextValue::String(arg))) => {
            let Some(arg) = named(arg) else {
                return err;
            };
            let value = match err.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(value)) => value.as_str(),
                _ => "",
            };
            refused_value(arg, value, args)
        }
        (ErrorKind::MissingRequiredArgument, Some(ContextValue::Strings(missing))) => {
            let names: Vec<String> = missing
                .iter()
                .map(|display| named(display).map_or_else(|| display.clone(), required))
                .collect();
            format!("required but not set: {}", names.join(", "))
        }
        _ => return err,
    };
    clap::Error::raw(err.kind(), message + "\n")
}

/// One error naming every refused setting, a line each.
pub fn refuse(problems: &[String]) -> clap::Error {
    clap::Error::raw(
        ErrorKind::ValueValidation,
        problems.join("\nerror: ") + "\n",
    )
}

/// The setting whose flag `display` shows (`--name <NAME>`), in any
/// subcommand.
fn setting<'a>(command: &'a Command, display: &str) -> Option<&'a Arg> {
    std::iter::once(command)
        .chain(command.get_subcommands())
        .flat_map(Command::get_arguments)
        .find(|arg| arg.to_string() == display && arg.get_env().is_some())
}

/// Why `value` of `arg` was refused, naming the variable unless the flag
/// was given, and the value unless it is secret.
fn refused_value(arg: &Arg, value: &str, args: &[OsString]) -> String {
    let on_command_line = arg.get_long().is_some_and(|long| {
        let flag = format!("--{long}");
        args.iter()
            .filter_map(|given| given.to_str())
            .any(|given| given == flag || given.starts_with(&format!("{flag}=")))
    });
    let name = match (on_command_line, arg.get_long(), arg.get_env()) {
        (true, Some(long), _) | (false, Some(long), None) => format!("--{long}"),
        (_, _, Some(env)) => env.to_string_lossy().into_owned(),
        (_, None, None) => arg.get_id().to_string(),
    };
    let shown = match arg.is_hide_env_values_set() {
        true => "its value (a secret, not shown)".to_owned(),
        false => format!("{value:?}"),
    };
    format!(
        "{name} does not take {shown}: it takes {}",
        parse::accepts(arg)
    )
}

/// How to set a required setting.
fn required(arg: &Arg) -> String {
    match (arg.get_env(), arg.get_long()) {
        (Some(env), Some(long)) => format!("{} (or --{long})", env.to_string_lossy()),
        (Some(env), None) => env.to_string_lossy().into_owned(),
        (None, _) => arg.to_string(),
    }
}
