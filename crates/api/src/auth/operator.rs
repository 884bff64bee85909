//! The operator's credential: a key of its own (`TOOLSERVER_OPERATOR_KEY`),
//! never a tenant token, so no tenant can reach the operator routes (and
//! raise its own limits) whatever its token says.

use std::fmt;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use subtle::ConstantTimeEq;

use super::AuthState;
use crate::error::ApiError;

/// The operator key; its `Debug` never shows it.
#[derive(Clone)]
pub struct OperatorKey(String);

impl OperatorKey {
    /// A key; refused when shorter than [`OperatorKey::MIN_BYTES`].
    pub fn new(key: String) -> Result<Self, String> {
        if key.len() < Self::MIN_BYTES {
            return Err(format!(
                "the operator key must be at least {} bytes long",
                Self::MIN_BYTES
            ));
        }
        Ok(Self(key))
    }

    /// The shortest key taken.
    pub const MIN_BYTES: usize = 16;

    fn matches(&self, presented: &str) -> bool {
        self.0.as_bytes().ct_eq(presented.as_bytes()).into()
    }
}

impl fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OperatorKey([redacted])")
    }
}

/// A request made with the operator key.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

impl<S: AuthState> FromRequestParts<S> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                ApiError::Unauthorized(
                    "operator routes need `Authorization: Bearer <operator key>`".into(),
                )
            })?;
        let Some(key) = state.operator_key() else {
            return Err(ApiError::Forbidden(
                "operator routes are switched off: this server has no TOOLSERVER_OPERATOR_KEY"
                    .into(),
            ));
        };
        if key.matches(presented) {
            Ok(Self)
        } else {
            Err(ApiError::Unauthorized(
                "operator routes take the operator key, not a tenant token".into(),
            ))
        }
    }
}
