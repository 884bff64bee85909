//! What a server process a test or bench starts inherits: no `TOOLSERVER_*`
//! variable of the shell the tests run in. Such a variable would change the
//! server's settings behind the test's back, or, when it is no setting (a
//! variable of the test tools, like the noisy bench's `TOOLSERVER_BIN`),
//! stop the server, which refuses variables it does not know.

use std::ffi::OsString;

/// The names of this process's `TOOLSERVER_*` variables, to remove from a
/// server's environment before the test sets the ones it means.
pub fn inherited_settings() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| name.to_string_lossy().starts_with("TOOLSERVER_"))
        .collect()
}
