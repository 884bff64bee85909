//! Cross-origin access for browser clients on other origins: which origins,
//! methods and request headers are allowed is configured (by default no
//! origin is), preflights are answered before authentication, and the
//! response headers a client needs (request id, stream markers, the resume
//! tail index) are exposed.

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Response headers a cross-origin page may read.
const EXPOSED: [&str; 3] = [
    "x-request-id",
    "x-vercel-ai-ui-message-stream",
    "x-workflow-stream-tail-index",
];

/// Which origins are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedOrigins {
    /// Any origin (`*`); credentials are then never allowed.
    Any,
    /// These exact origins (`scheme://host[:port]`).
    List(Vec<HeaderValue>),
}

/// The CORS policy; each field is a server setting.
#[derive(Debug, Clone)]
pub struct CorsSettings {
    /// Allowed origins.
    pub origins: AllowedOrigins,
    /// Allowed methods.
    pub methods: Vec<Method>,
    /// Allowed request headers.
    pub headers: Vec<HeaderName>,
    /// Whether pages may send credentials (cookies, TLS client
    /// certificates); the bearer token in `Authorization` needs none.
    pub allow_credentials: bool,
    /// How long a browser may cache a preflight answer.
    pub max_age: Duration,
}

/// A bad CORS setting.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct CorsError {
    /// The setting.
    pub setting: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl CorsSettings {
    /// The policy from the settings' text forms: `origins` (`*` or exact
    /// origins), `methods` and `headers` (names); empty `origins` is none.
    pub fn parse(
        origins: &[String],
        methods: &[String],
        headers: &[String],
        allow_credentials: bool,
        max_age: Duration,
    ) -> Result<Option<Self>, CorsError> {
        let origins: Vec<&str> = origins
            .iter()
            .map(|o| o.trim())
            .filter(|o| !o.is_empty())
            .collect();
        if origins.is_empty() {
            return Ok(None);
        }
        let origins = if origins == ["*"] {
            if allow_credentials {
                return Err(CorsError {
                    setting: "TOOLSERVER_CORS_ALLOW_CREDENTIALS",
                    message: "cannot be on when every origin (*) is allowed; name the origins"
                        .into(),
                });
            }
            AllowedOrigins::Any
        } else {
            AllowedOrigins::List(
                origins
                    .into_iter()
                    .map(parse_origin)
                    .collect::<Result<_, _>>()?,
            )
        };
        let methods = methods
            .iter()
            .map(|m| {
                Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes()).map_err(|_| {
                    CorsError {
                        setting: "TOOLSERVER_CORS_ALLOWED_METHODS",
                        message: format!("{m:?} is not an HTTP method"),
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        let headers = headers
            .iter()
            .map(|h| {
                HeaderName::from_bytes(h.trim().to_ascii_lowercase().as_bytes()).map_err(|_| {
                    CorsError {
                        setting: "TOOLSERVER_CORS_ALLOWED_HEADERS",
                        message: format!("{h:?} is not a header name"),
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Self {
            origins,
            methods,
            headers,
            allow_credentials,
            max_age,
        }))
    }

    /// The layer enforcing the policy.
    pub fn layer(&self) -> CorsLayer {
        let origins = match &self.origins {
            AllowedOrigins::Any => AllowOrigin::any(),
            AllowedOrigins::List(list) => AllowOrigin::list(list.clone()),
        };
        CorsLayer::new()
            .allow_origin(origins)
            .allow_methods(self.methods.clone())
            .allow_headers(self.headers.clone())
            .allow_credentials(self.allow_credentials)
            .expose_headers(EXPOSED.map(HeaderName::from_static))
            .max_age(self.max_age)
    }
}

/// `scheme://host[:port]`, nothing else (browsers send origins so).
fn parse_origin(origin: &str) -> Result<HeaderValue, CorsError> {
    let bad = |why: &str| CorsError {
        setting: "TOOLSERVER_CORS_ALLOWED_ORIGINS",
        message: format!("{origin:?} {why}"),
    };
    let url =
        url::Url::parse(origin).map_err(|_| bad("is not an origin (scheme://host[:port])"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("must be an http or https origin"));
    }
    let serialized = url.origin().ascii_serialization();
    if serialized != origin.trim_end_matches('/') {
        return Err(bad(&format!(
            "is not an origin; did you mean {serialized:?}?"
        )));
    }
    HeaderValue::from_str(&serialized).map_err(|_| bad("is not a header value"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn parse(origins: &[&str], credentials: bool) -> Result<Option<CorsSettings>, CorsError> {
        CorsSettings::parse(
            &texts(origins),
            &texts(&["get", "POST"]),
            &texts(&["Authorization", "content-type"]),
            credentials,
            Duration::from_secs(600),
        )
    }

    #[test]
    fn no_origin_means_no_cors() {
        assert!(parse(&[], false).unwrap().is_none());
        assert!(parse(&[" "], false).unwrap().is_none());
    }

    #[test]
    fn origins_methods_and_headers_are_normalized() {
        let settings = parse(&["https://app.example.com", "http://127.0.0.1:3000/"], true)
            .unwrap()
            .unwrap();
        assert_eq!(
            settings.origins,
            AllowedOrigins::List(vec![
                HeaderValue::from_static("https://app.example.com"),
                HeaderValue::from_static("http://127.0.0.1:3000"),
            ])
        );
        assert_eq!(settings.methods, vec![Method::GET, Method::POST]);
        assert_eq!(settings.headers[0], "authorization");
    }

    #[test]
    fn bad_settings_are_named() {
        for (origins, credentials, setting) in [
            (
                vec!["https://app.example.com/path"],
                false,
                "TOOLSERVER_CORS_ALLOWED_ORIGINS",
            ),
            (
                vec!["app.example.com"],
                false,
                "TOOLSERVER_CORS_ALLOWED_ORIGINS",
            ),
            (
                vec!["ftp://example.com"],
                false,
                "TOOLSERVER_CORS_ALLOWED_ORIGINS",
            ),
            (vec!["*"], true, "TOOLSERVER_CORS_ALLOW_CREDENTIALS"),
        ] {
            let err = parse(&origins, credentials).unwrap_err();
            assert_eq!(err.setting, setting, "{origins:?}");
        }
        assert!(parse(&["*"], false).unwrap().is_some());
    }
}
