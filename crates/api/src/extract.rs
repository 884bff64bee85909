//! Extractors whose rejections use the API's error shape.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// `axum::Json`, rejecting with [`ApiError`] (400, 413 or 415) instead of plain text.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// Maps an axum JSON rejection onto the API error it stands for.
pub fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::UnsupportedMediaType("expected Content-Type: application/json".into())
        }
        JsonRejection::BytesRejection(err) if err.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::PayloadTooLarge("request body is larger than the configured limit".into())
        }
        JsonRejection::JsonDataError(err) => ApiError::BadRequest {
            field: None,
            message: format!("invalid request body: {}", err.body_text()),
        },
        other => ApiError::BadRequest {
            field: None,
            message: other.body_text(),
        },
    }
}

/// `axum::extract::Query`, rejecting with a 400 [`ApiError`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::BadRequest {
        field: None,
        message: rejection.body_text(),
    }
}
