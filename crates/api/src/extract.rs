//! Extractors whose rejections use the API's error shape.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

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
        match axum::Json::<Value>::from_request(req, state).await {
            Ok(axum::Json(value)) => object_body(value, "body").map(Self),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// Reads a JSON document that must be an object into `T`; `part` names it
/// in the error. (serde would also read a struct from an array of its
/// fields in order, which no route takes.)
pub fn object_body<T: DeserializeOwned>(value: Value, part: &str) -> Result<T, ApiError> {
    if !value.is_object() {
        return Err(ApiError::bad_field(
            part,
            format!("the {part} must be a JSON object"),
        ));
    }
    serde_json::from_value(value).map_err(|err| ApiError::BadRequest {
        field: None,
        message: format!("invalid request {part}: {err}"),
    })
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

/// Deserializes an optional whole number as JSON Schema's `integer` reads
/// it: `25` and `25.0` alike.
pub fn optional_whole_u64<'de, D>(deserializer: D) -> Result<Option<u64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = Option::<Value>::deserialize(deserializer)?;
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(number) => toolserver_domain::validation::whole_u64(&number)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("expected a whole number of at least 0")),
    }
}
