//! Bearer-token authentication. Tokens are JWTs whose algorithm is pinned by
//! configuration; `exp` is always required, `iss` and `aud` whenever they are
//! configured. The account comes from a configurable claim. A bad token is
//! rejected with 401, never treated as anonymous.

mod jwks;
mod operator;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use toolserver_domain::AccountId;

use crate::error::ApiError;
pub use jwks::JwksKeys;
pub use operator::{Operator, OperatorKey};

/// Where verification keys come from.
#[derive(Clone)]
pub enum KeySource {
    /// One key for every token (an HS256 secret or a PEM public key).
    Static(Arc<DecodingKey>),
    /// Keys published at a JWKS URL, chosen by the token's `kid`.
    Jwks(Arc<JwksKeys>),
}

/// What a token must satisfy.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// The only accepted algorithm.
    pub algorithm: Algorithm,
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Required `aud`, when set.
    pub audience: Option<String>,
    /// The claim that names the account.
    pub account_claim: String,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
}

/// Verifies bearer tokens and names their account.
#[derive(Clone)]
pub struct Authenticator {
    keys: KeySource,
    validation: Validation,
    account_claim: String,
}

impl Authenticator {
    /// An authenticator for `settings` with keys from `keys`.
    pub fn new(settings: &AuthSettings, keys: KeySource) -> Self {
        let mut validation = Validation::new(settings.algorithm);
        let mut required = vec!["exp"];
        validation.leeway = settings.leeway.as_secs();
        validation.validate_nbf = true;
        match &settings.issuer {
            Some(issuer) => {
                validation.set_issuer(&[issuer]);
                required.push("iss");
            }
            None => validation.iss = None,
        }
        match &settings.audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        Self {
            keys,
            validation,
            account_claim: settings.account_claim.clone(),
        }
    }

    /// Verifies `token` and returns the account it speaks for.
    pub async fn authenticate(&self, token: &str) -> Result<AccountId, ApiError> {
        Ok(self.verify(token).await?.account)
    }

    /// Verifies `token`: the account it speaks for, and the end user it
    /// names (see [`EndUser`]).
    pub async fn verify(&self, token: &str) -> Result<Verified, ApiError> {
        let reject = |why: &str| ApiError::Unauthorized(format!("invalid bearer token: {why}"));
        let header = decode_header(token).map_err(|_| reject("malformed token"))?;
        if !self.validation.algorithms.contains(&header.alg) {
            return Err(reject("algorithm not accepted"));
        }
        let key = match &self.keys {
            KeySource::Static(key) => key.clone(),
            KeySource::Jwks(jwks) => jwks
                .key_for(header.kid.as_deref(), header.alg)
                .await
                .ok_or_else(|| reject("no key for this token"))?,
        };
        let claims = decode::<Map<String, Value>>(token, &key, &self.validation)
            .map_err(|err| reject(&describe(&err)))?
            .claims;
        // Only a string names an account: a number would land in the
        // account of its decimal text (`123` and `"123"` alike).
        let account = match claims.get(&self.account_claim) {
            Some(Value::String(raw)) => raw.clone(),
            Some(_) => {
                return Err(reject(&format!(
                    "claim `{}` must be a string",
                    self.account_claim
                )))
            }
            None => {
                return Err(reject(&format!(
                    "claim `{}` is missing",
                    self.account_claim
                )))
            }
        };
        let account = AccountId::parse(&account).map_err(|err| reject(&err.message))?;
        let subject = match claims.get(SUBJECT_CLAIM) {
            Some(Value::String(subject))
                if self.account_claim != SUBJECT_CLAIM
                    && subject.len() <= MAX_SUBJECT_BYTES
                    && !subject.contains('\0') =>
            {
                Some(subject.clone())
            }
            _ => None,
        };
        Ok(Verified { account, subject })
    }
}

fn describe(err: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match err.kind() {
        ErrorKind::ExpiredSignature => "token has expired".into(),
        ErrorKind::ImmatureSignature => "token is not valid yet".into(),
        ErrorKind::InvalidAudience => "wrong audience".into(),
        ErrorKind::InvalidIssuer => "wrong issuer".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("claim `{claim}` is required"),
        ErrorKind::InvalidSignature => "signature does not verify".into(),
        ErrorKind::InvalidAlgorithm => "algorithm not accepted".into(),
        _ => "token is malformed".into(),
    }
}

/// What the authenticating extractors need of the server's state.
pub trait AuthState: Send + Sync {
    /// The tenant token verifier.
    fn authenticator(&self) -> &Authenticator;
    /// The key of the operator routes; `None`: they are switched off.
    fn operator_key(&self) -> Option<&OperatorKey>;
}

/// The claim naming the end user a token acts for.
const SUBJECT_CLAIM: &str = "sub";

/// Longest end user id kept; a longer `sub` names none.
const MAX_SUBJECT_BYTES: usize = 255;

/// What a verified token says.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The account it speaks for.
    pub account: AccountId,
    /// The end user: its `sub` claim, when the account is named by another
    /// claim (at most 255 bytes, no NUL).
    pub subject: Option<String>,
}

/// The account of an authenticated request.
#[derive(Debug, Clone)]
pub struct Account(pub AccountId);

/// The end user an authenticated request acts for (its token's `sub`),
/// recorded on the tool calls it makes; read after [`Account`].
#[derive(Debug, Clone, Default)]
pub struct EndUser(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for EndUser {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<EndUser>()
            .cloned()
            .unwrap_or_default())
    }
}

impl<S: AuthState> FromRequestParts<S> for Account {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let value = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| ApiError::Unauthorized("missing Authorization header".into()))?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                ApiError::Unauthorized("Authorization header must be `Bearer <token>`".into())
            })?;
        let Verified { account, subject } = state.authenticator().verify(token).await?;
        tracing::Span::current().record("account.id", account.as_str());
        parts.extensions.insert(EndUser(subject));
        Ok(Self(account))
    }
}
