//! S3 bundle store (AWS or any S3-compatible service): objects at
//! `{prefix}{sha256}`, downloads through presigned GET URLs.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::error::{DisplayErrorContext, SdkError};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use bytes::Bytes;
use time::OffsetDateTime;
use toolserver_domain::{Secret, Sha256Digest};
use url::Url;

use crate::{digest_of, verify_content, BundleError, BundleStore, SignedUrl, StoredBundle};

/// Where and how to reach the bucket.
#[derive(Debug, Clone)]
pub struct S3Settings {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix, e.g. `bundles/`.
    pub prefix: String,
    /// Region name (S3-compatible stores usually accept any).
    pub region: String,
    /// Custom endpoint for S3-compatible stores; `None` for AWS.
    pub endpoint: Option<String>,
    /// Address buckets by path (`host/bucket/key`) rather than by host name.
    pub force_path_style: bool,
    /// Static credentials (access key id, secret access key); when absent
    /// the standard AWS provider chain is used.
    pub credentials: Option<(String, Secret)>,
}

/// Bundles kept in an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3BundleStore {
    client: Client,
    bucket: String,
    prefix: String,
}

fn s3_error<E: std::error::Error + 'static, R: std::fmt::Debug>(
    err: SdkError<E, R>,
) -> BundleError {
    BundleError::S3(DisplayErrorContext(err).to_string())
}

impl S3BundleStore {
    /// Builds a client from `settings`; makes no request.
    pub async fn connect(settings: S3Settings) -> Self {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(Region::new(settings.region.clone()));
        if let Some((key, secret)) = settings.credentials.clone() {
            loader = loader.credentials_provider(Credentials::new(
                key,
                secret.expose(),
                None,
                None,
                "toolserver-settings",
            ));
        }
        if let Some(endpoint) = &settings.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        let shared = loader.load().await;
        let config = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(settings.force_path_style)
            .build();
        Self {
            client: Client::from_conf(config),
            bucket: settings.bucket,
            prefix: settings.prefix,
        }
    }

    /// Checks that the bucket exists and the credentials may reach it.
    pub async fn check_bucket(&self) -> Result<(), BundleError> {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map_err(s3_error)?;
        Ok(())
    }

    fn key_of(&self, sha256: &Sha256Digest) -> String {
        format!("{}{}", self.prefix, sha256.to_hex())
    }
}

#[async_trait]
impl BundleStore for S3BundleStore {
    async fn put(&self, bytes: Bytes) -> Result<StoredBundle, BundleError> {
        let sha256 = digest_of(&bytes)?;
        let size = bytes.len() as u64;
        let newly_stored = !self.contains(&sha256).await?;
        if newly_stored {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(self.key_of(&sha256))
                .content_type("text/javascript")
                .body(ByteStream::from(bytes))
                .send()
                .await
                .map_err(s3_error)?;
        }
        Ok(StoredBundle {
            sha256,
            size,
            newly_stored,
        })
    }

    async fn get(&self, sha256: &Sha256Digest) -> Result<Bytes, BundleError> {
        let object = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.key_of(sha256))
            .send()
            .await
            .map_err(|err| match err.as_service_error() {
                Some(e) if e.is_no_such_key() => BundleError::NotFound,
                _ => s3_error(err),
            })?;
        let bytes = object
            .body
            .collect()
            .await
            .map_err(|err| BundleError::S3(err.to_string()))?
            .into_bytes();
        verify_content(sha256, &bytes)?;
        Ok(bytes)
    }

    async fn contains(&self, sha256: &Sha256Digest) -> Result<bool, BundleError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(self.key_of(sha256))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(false),
            Err(err) => Err(s3_error(err)),
        }
    }

    async fn signed_url(
        &self,
        sha256: &Sha256Digest,
        ttl: Duration,
    ) -> Result<SignedUrl, BundleError> {
        let presigning = PresigningConfig::expires_in(ttl).map_err(|_| BundleError::InvalidTtl)?;
        let started = OffsetDateTime::now_utc();
        let request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.key_of(sha256))
            .presigned(presigning)
            .await
            .map_err(s3_error)?;
        let url = Url::parse(request.uri()).map_err(|err| BundleError::S3(err.to_string()))?;
        Ok(SignedUrl {
            url,
            expires_at: started + ttl,
        })
    }

    fn verify_download(&self, _: &Sha256Digest, _: i64, _: &str) -> Result<(), BundleError> {
        Err(BundleError::NotFound)
    }

    fn backend(&self) -> &'static str {
        "s3"
    }
}
