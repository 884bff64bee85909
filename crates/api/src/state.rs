//! Shared state handed to every handler.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use toolserver_bundles::BundleStore;
use toolserver_domain::ToolLimits;

use crate::auth::Authenticator;

/// Limits and knobs of the HTTP API; each is a server setting.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Limits on uploaded tools.
    pub limits: ToolLimits,
    /// Lifetime of minted bundle download URLs.
    pub signed_url_ttl: Duration,
    /// Page size when a list request names none.
    pub default_page_size: u32,
    /// Largest page size a list request may ask for.
    pub max_page_size: u32,
    /// Largest request body, in bytes.
    pub max_request_bytes: usize,
    /// Longest time a request may take to produce its response head.
    pub request_timeout: Duration,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            limits: ToolLimits::default(),
            signed_url_ttl: Duration::from_secs(300),
            default_page_size: 50,
            max_page_size: 200,
            max_request_bytes: 2 * 1024 * 1024,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Cheap-to-clone handle on everything handlers need.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    pool: PgPool,
    bundles: Arc<dyn BundleStore>,
    auth: Authenticator,
    settings: ApiSettings,
}

impl AppState {
    /// Bundles the server's parts.
    pub fn new(
        pool: PgPool,
        bundles: Arc<dyn BundleStore>,
        auth: Authenticator,
        settings: ApiSettings,
    ) -> Self {
        Self(Arc::new(Inner {
            pool,
            bundles,
            auth,
            settings,
        }))
    }

    /// The database pool.
    pub fn pool(&self) -> &PgPool {
        &self.0.pool
    }

    /// The bundle store.
    pub fn bundles(&self) -> &dyn BundleStore {
        self.0.bundles.as_ref()
    }

    /// The token verifier.
    pub fn auth(&self) -> &Authenticator {
        &self.0.auth
    }

    /// API limits and knobs.
    pub fn settings(&self) -> &ApiSettings {
        &self.0.settings
    }
}
