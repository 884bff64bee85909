//! Value parsers of settings that take less than their type does: whole
//! numbers within a range, secrets of a least length, hex keys. Each says in
//! words what it accepts; the words ride along as the parser's one possible
//! value, hidden, which is how [`accepts`] reads them back for `--help`, the
//! start-up errors and the settings reference.

use std::any::TypeId;
use std::ffi::OsStr;
use std::fmt::Display;
use std::net::{IpAddr, SocketAddr};
use std::ops::{Bound, RangeBounds};
use std::path::PathBuf;
use std::str::FromStr;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command};
use toolserver_domain::Secret;
use url::Url;

use crate::metrics_endpoint::MetricsListen;

/// A whole-number type a setting can have.
pub trait Whole: Copy + PartialOrd + Display + FromStr + Send + Sync + 'static {
    /// The smallest value of the type.
    const LEAST: Self;
    /// The largest value of the type.
    const MOST: Self;
    /// The value one below, if there is one.
    fn below(self) -> Option<Self>;
}

macro_rules! whole {
    ($($type:ty),*) => {$(
        impl Whole for $type {
            const LEAST: Self = <$type>::MIN;
            const MOST: Self = <$type>::MAX;
            fn below(self) -> Option<Self> {
                self.checked_sub(1)
            }
        }
    )*};
}

whole!(u16, u32, u64, usize, i32);

/// Whole numbers from `least` to `most`, both included.
#[derive(Debug, Clone, Copy)]
pub struct Within<T> {
    least: T,
    most: T,
}

/// A parser of whole numbers of type `T` within `range`, e.g.
/// `within::<u64>(100..)` or `within::<usize>(1..=64)`.
pub fn within<T: Whole>(range: impl RangeBounds<T>) -> Within<T> {
    let least = match range.start_bound() {
        Bound::Included(least) => *least,
        Bound::Excluded(_) | Bound::Unbounded => T::LEAST,
    };
    let most = match range.end_bound() {
        Bound::Included(most) => *most,
        Bound::Excluded(end) => end.below().unwrap_or(T::LEAST),
        Bound::Unbounded => T::MOST,
    };
    Within { least, most }
}

impl<T: Whole> Within<T> {
    fn description(&self) -> String {
        whole_number(
            &self.least,
            self.least == T::LEAST,
            &self.most,
            self.most == T::MOST,
        )
    }
}

impl<T: Whole> TypedValueParser for Within<T> {
    type Value = T;

    fn parse_ref(&self, cmd: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<T, clap::Error> {
        value
            .to_str()
            .and_then(|text| text.parse::<T>().ok())
            .filter(|number| (self.least..=self.most).contains(number))
            .ok_or_else(|| invalid(cmd, arg, value))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        described(self.description())
    }
}

/// Whole numbers from `least` to `most`, where `lowest` and `highest` say
/// whether they are the ends of the type (a number type's own ends go
/// without saying, when the lowest is 0).
fn whole_number(least: &dyn Display, lowest: bool, most: &dyn Display, highest: bool) -> String {
    let unsigned = least.to_string() == "0";
    match (lowest && unsigned, highest) {
        (true, true) => "a whole number".to_owned(),
        (true, false) => format!("a whole number up to {most}"),
        (false, true) => format!("a whole number, at least {least}"),
        (false, false) => format!("a whole number from {least} to {most}"),
    }
}

/// A secret of at least `least_bytes` bytes (any text when 0).
#[derive(Debug, Clone, Copy)]
pub struct SecretText {
    least_bytes: usize,
}

/// A parser of secrets of at least `least_bytes` bytes.
pub fn secret(least_bytes: usize) -> SecretText {
    SecretText { least_bytes }
}

impl TypedValueParser for SecretText {
    type Value = Secret;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<Secret, clap::Error> {
        value
            .to_str()
            .filter(|text| text.len() >= self.least_bytes)
            .map(Secret::from)
            .ok_or_else(|| invalid(cmd, arg, value))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        described(match self.least_bytes {
            0 => "text".to_owned(),
            1 => "non-empty text".to_owned(),
            least => format!("text of at least {least} bytes"),
        })
    }
}

/// A key of exactly `bytes` bytes written as hex.
#[derive(Debug, Clone, Copy)]
pub struct HexKey {
    bytes: usize,
}

/// A parser of keys of `bytes` bytes written as `2 × bytes` hex characters.
pub fn hex_key(bytes: usize) -> HexKey {
    HexKey { bytes }
}

impl TypedValueParser for HexKey {
    type Value = Secret;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<Secret, clap::Error> {
        value
            .to_str()
            .map(str::trim)
            .filter(|text| hex::decode(text).is_ok_and(|key| key.len() == self.bytes))
            .map(Secret::from)
            .ok_or_else(|| invalid(cmd, arg, value))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        described(format!(
            "{} hex characters ({} bytes)",
            self.bytes * 2,
            self.bytes
        ))
    }
}

/// An absolute http(s) URL, kept as it was written.
#[derive(Debug, Clone, Copy)]
pub struct HttpUrl;

/// A parser of absolute http(s) URLs.
pub fn http_url() -> HttpUrl {
    HttpUrl
}

impl TypedValueParser for HttpUrl {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        value
            .to_str()
            .filter(|text| {
                Url::parse(text).is_ok_and(|url| matches!(url.scheme(), "http" | "https"))
            })
            .map(str::to_owned)
            .ok_or_else(|| invalid(cmd, arg, value))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        described("absolute http(s) URLs".to_owned())
    }
}

/// The one hidden possible value that carries a parser's description.
fn described(description: String) -> Option<Box<dyn Iterator<Item = PossibleValue>>> {
    Some(Box::new(std::iter::once(
        PossibleValue::new(description).hide(true),
    )))
}

/// The error of a value `arg` does not accept, with the context the
/// start-up errors name the setting from.
fn invalid(cmd: &Command, arg: Option<&Arg>, value: &OsStr) -> clap::Error {
    let mut err = clap::Error::new(ErrorKind::ValueValidation).with_cmd(cmd);
    if let Some(arg) = arg {
        err.insert(
            ContextKind::InvalidArg,
            ContextValue::String(arg.to_string()),
        );
    }
    err.insert(
        ContextKind::InvalidValue,
        ContextValue::String(value.to_string_lossy().into_owned()),
    );
    err
}

/// What `arg` accepts, in words: its parser's description, its possible
/// values, or what its type takes.
pub fn accepts(arg: &Arg) -> String {
    let list = match arg.get_value_delimiter() {
        Some(delimiter) => format!("a `{delimiter}`-separated list of "),
        None => String::new(),
    };
    let possible = arg.get_value_parser().possible_values();
    let possible: Vec<PossibleValue> = possible.map(Iterator::collect).unwrap_or_default();
    let one = if let Some(hidden) = possible.iter().find(|value| value.is_hide_set()) {
        hidden.get_name().to_owned()
    } else if !possible.is_empty() {
        let names: Vec<String> = possible
            .iter()
            .map(|value| format!("`{}`", value.get_name()))
            .collect();
        format!("one of {}", names.join(", "))
    } else {
        of_type(arg)
    };
    format!("{list}{one}")
}

/// What a value of `arg`'s type takes.
fn of_type(arg: &Arg) -> String {
    let parsed = arg.get_value_parser().type_id();
    let whole = |most: &dyn Display, of_64_bits: bool| whole_number(&0, true, most, of_64_bits);
    if parsed == TypeId::of::<bool>() {
        "`true` or `false`".to_owned()
    } else if parsed == TypeId::of::<u16>() {
        whole(&u16::MAX, false)
    } else if parsed == TypeId::of::<u32>() {
        whole(&u32::MAX, false)
    } else if parsed == TypeId::of::<u64>() || parsed == TypeId::of::<usize>() {
        whole(&u64::MAX, true)
    } else if parsed == TypeId::of::<SocketAddr>() {
        "an IP address and port, e.g. `127.0.0.1:8080`".to_owned()
    } else if parsed == TypeId::of::<MetricsListen>() {
        "an IP address and port, or `off`".to_owned()
    } else if parsed == TypeId::of::<Url>() {
        "an absolute URL".to_owned()
    } else if parsed == TypeId::of::<PathBuf>() {
        "a path".to_owned()
    } else if parsed == TypeId::of::<(String, IpAddr)>() {
        "`name=ip` pairs".to_owned()
    } else {
        "text".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<P: TypedValueParser>(parser: &P, value: &str) -> Option<P::Value> {
        let cmd = Command::new("test");
        parser.parse_ref(&cmd, None, OsStr::new(value)).ok()
    }

    #[test]
    fn a_range_takes_its_ends_and_nothing_past_them() {
        let parser = within::<u64>(100..=200);
        assert_eq!(parse(&parser, "100"), Some(100));
        assert_eq!(parse(&parser, "200"), Some(200));
        assert_eq!(parse(&parser, "99"), None);
        assert_eq!(parse(&parser, "201"), None);
        assert_eq!(parse(&parser, "1e2"), None);
        assert_eq!(parse(&parser, "-100"), None);
        assert_eq!(within::<usize>(1..65).most, 64);
    }

    #[test]
    fn a_range_says_what_it_takes() {
        assert_eq!(
            within::<u64>(100..).description(),
            "a whole number, at least 100"
        );
        assert_eq!(
            within::<u64>(..=100_000).description(),
            "a whole number up to 100000"
        );
        assert_eq!(within::<u64>(..).description(), "a whole number");
        assert_eq!(
            within::<i32>(1..=5).description(),
            "a whole number from 1 to 5"
        );
    }

    #[test]
    fn a_secret_needs_its_least_length_and_a_key_its_exact_one() {
        assert!(parse(&secret(16), &"k".repeat(15)).is_none());
        assert_eq!(
            parse(&secret(16), &"k".repeat(16)).map(|key| key.expose().len()),
            Some(16)
        );
        assert!(parse(&hex_key(32), &"ab".repeat(32)).is_some());
        assert!(parse(&hex_key(32), &"ab".repeat(31)).is_none());
        assert!(parse(&hex_key(32), &"zz".repeat(32)).is_none());
    }

    #[test]
    fn an_http_url_needs_its_scheme() {
        assert!(parse(&http_url(), "https://as.example.com").is_some());
        assert!(parse(&http_url(), "issuer-without-scheme").is_none());
        assert!(parse(&http_url(), "ftp://files.example.com").is_none());
    }
}
