//! An account's OAuth provider as an OAuth 2 client (the `oauth2` crate):
//! its endpoints, client id and opened secret. Token requests go through
//! the public-only outbound client, bounded in time.

use std::time::Duration;

use oauth2::basic::{BasicClient, BasicErrorResponse, BasicTokenResponse};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, EndpointNotSet, EndpointSet,
    HttpClientError, PkceCodeVerifier, RedirectUrl, RefreshToken, RequestTokenError, TokenResponse,
    TokenUrl,
};
use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::oauth_providers::{self, OAuthProviderRecord};
use toolserver_store::StoreError;
use url::Url;

use super::granted::Granted;
use super::sealed::client_secret_name;
use super::{ConnectionError, Connections};
use crate::outbound::check_url;

/// Longest a token endpoint may take to answer.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);

/// A provider's client with its authorization and token endpoints set.
pub(super) type OAuthClient =
    BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// One account's provider, ready to authorize and exchange tokens.
pub(super) struct Provider {
    /// As configured.
    pub record: OAuthProviderRecord,
    /// As a client.
    pub client: OAuthClient,
}

impl Connections {
    /// `account`'s provider `name`, redirecting to `redirect` when given.
    pub(super) async fn provider(
        &self,
        account: &AccountId,
        name: &str,
        redirect: Option<&Url>,
    ) -> Result<Provider, ConnectionError> {
        let record = oauth_providers::get(&self.pool, account, name)
            .await
            .map_err(|err| match err {
                StoreError::NotFound => ConnectionError::NoProvider(name.to_owned()),
                other => ConnectionError::Store(other),
            })?;
        let secret = record
            .client_secret_sealed
            .as_deref()
            .map(|sealed| {
                self.sealer
                    .open_account_secret(sealed, account, &client_secret_name(name))
                    .map_err(|_| ConnectionError::Sealing)
            })
            .transpose()?;
        let invalid = |field: &str, err: url::ParseError| {
            ConnectionError::Refused(format!("the provider's {field} is not a URL: {err}"))
        };
        let mut client = BasicClient::new(ClientId::new(record.client_id.clone()))
            .set_auth_uri(
                AuthUrl::new(record.authorization_url.clone())
                    .map_err(|err| invalid("authorizationUrl", err))?,
            )
            .set_token_uri(
                TokenUrl::new(record.token_url.clone()).map_err(|err| invalid("tokenUrl", err))?,
            );
        if let Some(secret) = secret {
            client = client.set_client_secret(ClientSecret::new(secret));
        }
        if let Some(redirect) = redirect {
            client = client.set_redirect_uri(RedirectUrl::from_url(redirect.clone()));
        }
        Ok(Provider { record, client })
    }

    /// Exchanges an authorization `code` (with its PKCE `verifier`).
    pub(super) async fn exchange_code(
        &self,
        provider: &Provider,
        code: &str,
        verifier: String,
    ) -> Result<Granted, ConnectionError> {
        self.check_token_url(provider)?;
        let request = provider
            .client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier))
            .request_async(&self.http);
        granted(tokio::time::timeout(TOKEN_TIMEOUT, request).await)
    }

    /// Trades `refresh` for new tokens.
    pub(super) async fn exchange_refresh(
        &self,
        provider: &Provider,
        refresh: String,
    ) -> Result<Granted, ConnectionError> {
        self.check_token_url(provider)?;
        let token = RefreshToken::new(refresh);
        let request = provider
            .client
            .exchange_refresh_token(&token)
            .request_async(&self.http);
        granted(tokio::time::timeout(TOKEN_TIMEOUT, request).await)
    }

    fn check_token_url(&self, provider: &Provider) -> Result<(), ConnectionError> {
        let url = Url::parse(&provider.record.token_url)
            .map_err(|err| ConnectionError::Unreachable(err.to_string()))?;
        check_url(&url, &self.policy).map_err(ConnectionError::Unreachable)
    }
}

type TokenAnswer = Result<
    BasicTokenResponse,
    RequestTokenError<HttpClientError<reqwest::Error>, BasicErrorResponse>,
>;

/// A token endpoint's answer as granted tokens, or why not: a refusal the
/// provider stated, or a failure to reach it.
fn granted(
    answer: Result<TokenAnswer, tokio::time::error::Elapsed>,
) -> Result<Granted, ConnectionError> {
    let token = match answer {
        Err(_) => {
            return Err(ConnectionError::Unreachable(format!(
                "the token endpoint did not answer within {} s",
                TOKEN_TIMEOUT.as_secs()
            )))
        }
        Ok(Ok(token)) => token,
        Ok(Err(RequestTokenError::ServerResponse(refusal))) => {
            let described = refusal
                .error_description()
                .map(|text| format!(": {text}"))
                .unwrap_or_default();
            return Err(ConnectionError::Refused(format!(
                "{}{described}",
                refusal.error()
            )));
        }
        Ok(Err(RequestTokenError::Parse(err, _))) => {
            return Err(ConnectionError::Unreachable(format!(
                "the token endpoint's answer is not a token: {err}"
            )))
        }
        Ok(Err(err)) => return Err(ConnectionError::Unreachable(err.to_string())),
    };
    Ok(Granted {
        access: token.access_token().secret().clone(),
        refresh: token
            .refresh_token()
            .map(|refresh| refresh.secret().clone()),
        expires_at: token
            .expires_in()
            .map(|lifetime| OffsetDateTime::now_utc() + lifetime),
        scopes: token
            .scopes()
            .map(|scopes| scopes.iter().map(|scope| scope.to_string()).collect())
            .unwrap_or_default(),
    })
}
