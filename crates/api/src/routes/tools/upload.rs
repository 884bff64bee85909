//! Reading an upload body — JSON with a base64 bundle, or multipart with a
//! `manifest` part and a `bundle` part — into manifest fields and bundle bytes,
//! enforcing the bundle size limit before anything is stored.

use axum::extract::multipart::MultipartError;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use base64::Engine;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::{object_body, ApiJson};
use crate::state::AppState;

/// The two parts of an upload: manifest fields and (maybe) bundle bytes.
pub struct Upload<M> {
    /// The manifest fields, as sent.
    pub manifest: Option<M>,
    /// The decoded bundle, when one was sent.
    pub bundle: Option<Bytes>,
}

/// A JSON body that carries manifest fields plus a base64 `bundle`.
pub trait WithBase64Bundle: DeserializeOwned {
    /// The manifest-only form found in a multipart `manifest` part.
    type Manifest: DeserializeOwned;

    /// Splits the body into manifest fields and the encoded bundle.
    fn split(self) -> (Self::Manifest, Option<String>);
}

/// Reads an upload body of either media type.
pub async fn read_upload<J: WithBase64Bundle>(
    req: Request,
    state: &AppState,
) -> Result<Upload<J::Manifest>, ApiError> {
    let max = state.settings().limits.max_bundle_bytes;
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("multipart/form-data") {
        let multipart = Multipart::from_request(req, state)
            .await
            .map_err(|err| ApiError::bad_field("body", err.body_text()))?;
        read_multipart(multipart, max).await
    } else if content_type.starts_with("application/json") {
        let ApiJson(body) = ApiJson::<J>::from_request(req, state).await?;
        let (manifest, encoded) = body.split();
        let bundle = encoded.map(|text| decode_bundle(&text, max)).transpose()?;
        Ok(Upload {
            manifest: Some(manifest),
            bundle,
        })
    } else {
        Err(ApiError::UnsupportedMediaType(
            "send application/json (base64 bundle) or multipart/form-data (manifest + bundle parts)"
                .into(),
        ))
    }
}

async fn read_multipart<M: DeserializeOwned>(
    mut multipart: Multipart,
    max: usize,
) -> Result<Upload<M>, ApiError> {
    let mut upload = Upload {
        manifest: None,
        bundle: None,
    };
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or("").to_owned();
        match name.as_str() {
            "manifest" if upload.manifest.is_none() => {
                let bytes = field.bytes().await.map_err(multipart_error)?;
                let manifest: Value = serde_json::from_slice(&bytes).map_err(|err| {
                    ApiError::bad_field("manifest", format!("manifest part is not valid: {err}"))
                })?;
                upload.manifest = Some(object_body(manifest, "manifest")?);
            }
            "bundle" if upload.bundle.is_none() => {
                let bytes = field.bytes().await.map_err(multipart_error)?;
                check_size(bytes.len(), max)?;
                upload.bundle = Some(bytes);
            }
            "manifest" | "bundle" => {
                return Err(ApiError::bad_field(
                    &name,
                    format!("part `{name}` was sent twice"),
                ));
            }
            other => {
                return Err(ApiError::bad_field(
                    other,
                    format!("unknown part `{other}`; expected `manifest` and `bundle`"),
                ));
            }
        }
    }
    Ok(upload)
}

fn multipart_error(err: MultipartError) -> ApiError {
    if err.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge("request body is larger than the configured limit".into())
    } else {
        ApiError::bad_field(
            "body",
            format!("malformed multipart body: {}", err.body_text()),
        )
    }
}

fn decode_bundle(encoded: &str, max: usize) -> Result<Bytes, ApiError> {
    let engine = base64::engine::general_purpose::STANDARD;
    // Refuse oversize input before spending memory decoding it.
    check_size(
        base64::decoded_len_estimate(encoded.len()).saturating_sub(2),
        max,
    )?;
    let bytes = engine.decode(encoded).map_err(|err| {
        toolserver_domain::ValidationError::new("bundle", format!("is not valid base64: {err}"))
    })?;
    check_size(bytes.len(), max)?;
    Ok(bytes.into())
}

fn check_size(len: usize, max: usize) -> Result<(), ApiError> {
    if len > max {
        return Err(ApiError::PayloadTooLarge(format!(
            "bundle is {len} bytes; the limit is {max}"
        )));
    }
    Ok(())
}
