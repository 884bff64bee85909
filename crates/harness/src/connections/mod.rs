//! Per-user OAuth connections: an account configures OAuth providers
//! (endpoints, client id and sealed secret, scopes); each end user connects
//! their own grant, kept per (account, end user, provider) with its tokens
//! sealed, refreshed before they expire, and marked failed (and announced
//! on the provider's webhook) when the provider refuses a refresh.
//!
//! A turn's call of a tool that needs a connection its end user lacks does
//! not fail: the turn shows an authorization URL (PKCE, state bound to the
//! call) in a `data-authorization` part and stops; the redirect back
//! (`GET /oauth/callback`) stores the connection and resumes the turn,
//! which runs the call with the user's token ([`Lifecycle`] methods in
//! `resume.rs`). Turns with no end user act for the account itself (user
//! `""`).
//!
//! [`Lifecycle`]: crate::lifecycle::Lifecycle

mod authorize;
mod client;
mod complete;
mod error;
mod granted;
mod refresh;
mod resume;
mod sealed;
mod token;

use sqlx::PgPool;

use crate::outbound::OutboundPolicy;
use crate::sealing::SecretBox;

pub use authorize::{AskedAuthorization, Authorizer, StartedAuthorization};
pub use complete::CompletedAuthorization;
pub use error::ConnectionError;
pub use refresh::RefreshSweep;
pub use resume::AuthorizationSweep;
pub use sealed::seal_client_secret;

/// The end user a turn with none acts as: the account itself.
pub const ACCOUNT_USER: &str = "";

/// What connections need: the database, the sealer and the public-only
/// outbound client that reaches providers' token endpoints.
#[derive(Clone)]
pub struct Connections {
    pool: PgPool,
    sealer: SecretBox,
    http: reqwest::Client,
    policy: OutboundPolicy,
}

impl Connections {
    /// Connections kept in `pool`, sealed by `sealer`, refreshed through
    /// `http` (which reaches what `policy` allows).
    pub fn new(
        pool: PgPool,
        sealer: SecretBox,
        http: reqwest::Client,
        policy: OutboundPolicy,
    ) -> Self {
        Self {
            pool,
            sealer,
            http,
            policy,
        }
    }
}
