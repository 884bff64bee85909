//! The one error type of the HTTP API. Every variant documents its status;
//! bodies are `{"error": {"code", "message", "field"?}}`. A 5xx body is fixed
//! text: its cause rides on the response as [`ErrorCause`] and is logged once
//! by the request-logging middleware, inside the request's span.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use toolserver_bundles::BundleError;
use toolserver_domain::conversation::MAX_CONVERSATION_ID_CHARS;
use toolserver_domain::validation::abbreviate;
use toolserver_domain::{ConversationIdError, ValidationError};
use toolserver_harness::lifecycle::{LeaseError, LifecycleError};
use toolserver_harness::stream::StreamError;
use toolserver_harness::submission::SubmitError;
use toolserver_harness::tools::RegistryError;
use toolserver_harness::AgentLoadError;
use toolserver_store::StoreError;
use utoipa::ToSchema;

use crate::admission::{AdmissionError, Refusal};

/// Longest error message sent, in bytes; longer ones end in `…`.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Longest `field` sent, in bytes.
pub const MAX_FIELD_BYTES: usize = 256;

/// An API failure, mapped to a status code and the JSON error body.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed (bad JSON, unknown or mistyped field, bad parameter).
    #[error("{message}")]
    BadRequest {
        /// The offending field, when one can be named.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// 401: the bearer token is missing or not acceptable.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: authenticated, but not for this resource (e.g. another call's job token).
    #[error("{0}")]
    Forbidden(String),
    /// 403: the account's policies deny the call (`policy_denied`), or
    /// ask a person first, which this request path cannot
    /// (`approval_required`); the message names the policies.
    #[error("{message}")]
    PolicyRefused {
        /// `policy_denied` or `approval_required`.
        code: &'static str,
        /// The decision and the policies that made it.
        message: String,
    },
    /// 404: no such resource for this account.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 409: the request conflicts with stored state.
    #[error("{message}")]
    Conflict {
        /// Machine-readable reason.
        code: &'static str,
        /// What conflicts.
        message: String,
    },
    /// 410: a signed link that has expired.
    #[error("{0}")]
    Gone(String),
    /// 413: a body or bundle over its configured limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415: a request body in a media type this route does not take.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: well-formed input that breaks a rule.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// 429: a limit of the account is reached; `Retry-After` says when to
    /// try again, the body names the limit and its value.
    #[error(transparent)]
    TooManyRequests(#[from] Refusal),
    /// 408: the request did not finish within the configured timeout.
    #[error("request timed out")]
    Timeout,
    /// 503: the server's runners are all taken and none freed up in time;
    /// `Retry-After` says when to try again.
    #[error("{message}")]
    Overloaded {
        /// Which capacity ran out, with its value.
        message: String,
        /// When trying again may succeed.
        retry_after: std::time::Duration,
    },
    /// 503: a dependency (the database, the bundle store) is unreachable right now.
    #[error("service unavailable")]
    Unavailable(String),
    /// 500: a bug. The cause is logged, never shown.
    #[error("internal server error")]
    Internal(String),
}

/// The JSON error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The error inside [`ErrorBody`].
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable code, e.g. `validation_failed`.
    pub code: String,
    /// Human-readable explanation naming what was wrong.
    pub message: String,
    /// The request field at fault, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// On a 429: the limit reached (`concurrentCalls`, `callsPerMinute`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// On a 429: the limit's value for the account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u32>,
    /// On a 429: milliseconds until a retry may pass (`Retry-After` in
    /// whole seconds, rounded up).
    #[serde(rename = "retryAfterMs", skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// The internal cause of a 5xx, attached to the response for logging.
#[derive(Debug, Clone)]
pub struct ErrorCause(pub String);

impl ApiError {
    /// A 400 naming `field`.
    pub fn bad_field(field: &str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            field: Some(field.to_owned()),
            message: message.into(),
        }
    }

    /// The machine-readable code of the error body.
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        let status = match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::PolicyRefused { code, .. } => return (StatusCode::FORBIDDEN, code),
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict { code, .. } => return (StatusCode::CONFLICT, code),
            Self::Gone(_) => StatusCode::GONE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Validation(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Timeout => StatusCode::REQUEST_TIMEOUT,
            Self::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Overloaded { .. } => {
                return (StatusCode::SERVICE_UNAVAILABLE, "capacity_exhausted")
            }
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, code_for_status(status))
    }
}

/// The machine-readable code of an error answered with `status`, for every
/// error body: those of [`ApiError`] and those the request edge rewrites.
pub fn code_for_status(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "invalid_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::CONFLICT => "conflict",
        StatusCode::GONE => "expired",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "validation_failed",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "headers_too_large",
        StatusCode::TOO_MANY_REQUESTS => "limit_exceeded",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "error",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let field = match &self {
            Self::BadRequest { field, .. } => field.clone(),
            Self::Validation(err) => Some(err.field.clone()),
            _ => None,
        };
        let cause = match &self {
            Self::Unavailable(cause) | Self::Internal(cause) => Some(cause.clone()),
            _ => None,
        };
        let refusal = match &self {
            Self::TooManyRequests(refusal) => Some(refusal),
            _ => None,
        };
        // Messages may quote input (a mistyped value, a schema violation);
        // the quote is cut so an error never echoes a large request back.
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: abbreviate(&self.to_string(), MAX_MESSAGE_BYTES),
                field: field.map(|f| abbreviate(&f, MAX_FIELD_BYTES)),
                limit: refusal.map(|refusal| refusal.kind.name().to_owned()),
                value: refusal.map(|refusal| refusal.value),
                retry_after_ms: refusal.map(|refusal| {
                    u64::try_from(refusal.retry_after.as_millis()).unwrap_or(u64::MAX)
                }),
            },
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(refusal) = refusal {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(refusal.retry_after_secs()),
            );
            crate::metrics::refused(refusal);
        }
        if let Some(cause) = cause {
            response.extensions_mut().insert(ErrorCause(cause));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => Self::NotFound("resource"),
            StoreError::Conflict { constraint } if constraint == "tools_account_name_key" => {
                Self::Conflict {
                    code: "tool_name_taken",
                    message: "a tool with this name already exists in the account".into(),
                }
            }
            StoreError::Conflict { constraint } => Self::Conflict {
                code: "conflict",
                message: format!("conflicts with an existing resource ({constraint})"),
            },
            StoreError::Unavailable(cause) => Self::Unavailable(cause.to_string()),
            StoreError::Other(cause) => Self::Internal(cause.to_string()),
        }
    }
}

impl From<BundleError> for ApiError {
    fn from(err: BundleError) -> Self {
        match err {
            BundleError::Empty => ValidationError::new("bundle", "must not be empty").into(),
            BundleError::NotFound => Self::NotFound("bundle"),
            BundleError::Expired => Self::Gone("download link expired".into()),
            BundleError::BadSignature => Self::NotFound("bundle"),
            BundleError::S3(cause) => Self::Unavailable(cause),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<LeaseError> for ApiError {
    fn from(err: LeaseError) -> Self {
        match err {
            LeaseError::Busy => Self::Conflict {
                code: "conversation_busy",
                message: err.to_string(),
            },
            LeaseError::OtherAgent => Self::Conflict {
                code: "conversation_of_other_agent",
                message: err.to_string(),
            },
            LeaseError::Malformed(_) => Self::Internal(err.to_string()),
            LeaseError::Store(store) => store.into(),
            LeaseError::Stream(stream) => stream.into(),
        }
    }
}

impl From<LifecycleError> for ApiError {
    fn from(err: LifecycleError) -> Self {
        match err {
            LifecycleError::Store(store) => store.into(),
            LifecycleError::Lease(lease) => lease.into(),
            LifecycleError::Stream(stream) => stream.into(),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<StreamError> for ApiError {
    fn from(err: StreamError) -> Self {
        match err {
            StreamError::Store(store) => store.into(),
            StreamError::Log(log) => Self::Unavailable(log.to_string()),
        }
    }
}

impl From<AdmissionError> for ApiError {
    fn from(err: AdmissionError) -> Self {
        match err {
            AdmissionError::Refused(refusal) => Self::TooManyRequests(refusal),
            AdmissionError::Store(store) => store.into(),
        }
    }
}

impl From<ConversationIdError> for ApiError {
    fn from(err: ConversationIdError) -> Self {
        match err {
            ConversationIdError::Length { field } => Self::bad_field(
                &field,
                format!("must be 1-{MAX_CONVERSATION_ID_CHARS} characters"),
            ),
            ConversationIdError::Nul(nul) => nul.into(),
        }
    }
}

impl From<AgentLoadError> for ApiError {
    fn from(err: AgentLoadError) -> Self {
        match err {
            AgentLoadError::NotFound => Self::NotFound("agent"),
            AgentLoadError::Unseal(cause) => Self::Internal(cause),
            AgentLoadError::Registry(RegistryError::Invalid(invalid)) => invalid.into(),
            AgentLoadError::Registry(RegistryError::Store(store))
            | AgentLoadError::Store(store) => store.into(),
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(err: SubmitError) -> Self {
        match err {
            SubmitError::Agent(agent) => agent.into(),
            SubmitError::Invalid(invalid) => invalid.into(),
            SubmitError::BadField { field, message } => Self::bad_field(&field, message),
            SubmitError::ApprovalNotPending(message) => Self::Conflict {
                code: "approval_not_pending",
                message,
            },
            SubmitError::TooLarge(message) => Self::PayloadTooLarge(message),
            SubmitError::Lease(lease) => lease.into(),
            SubmitError::Store(store) => store.into(),
            SubmitError::Stream(stream) => stream.into(),
            SubmitError::Lifecycle(lifecycle) => lifecycle.into(),
        }
    }
}

/// The result type of handlers.
pub type ApiResult<T> = Result<T, ApiError>;
