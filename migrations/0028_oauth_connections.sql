-- OAuth connections: tools that act for a user at a third party with
-- that user's own tokens.
--
-- An account registers the OAuth providers its tools use (the provider's
-- endpoints and the account's client there); the server runs the
-- authorization code flow with PKCE for an end user of the account and
-- keeps the tokens it got, refreshing them before they expire. Every
-- secret (client secret, tokens, PKCE verifier) is sealed under the
-- server's secrets key and bound to its account, like `account_secrets`;
-- sealing and opening are the server's, the database only keeps bytes.

-- An account's OAuth providers, by name.
CREATE TABLE oauth_providers (
    account_id            TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name                  TEXT NOT NULL CHECK (name ~ '^[A-Za-z0-9_]{1,64}$'),
    authorization_url     TEXT NOT NULL,
    token_url             TEXT NOT NULL,
    client_id             TEXT NOT NULL,
    -- NULL: a public client (PKCE only, no secret).
    client_secret_sealed  BYTEA,
    -- The scopes asked for when none are named.
    scopes                TEXT[] NOT NULL DEFAULT '{}',
    -- Where the account hears of a connection that failed for good.
    webhook               TEXT,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, name)
);

-- One user's tokens at one provider. `user_id` is the end user the
-- tokens act for; '' is the account itself, for turns with no end user.
-- A connection whose refresh failed for good is `failed` (with the error)
-- until the user authorizes again; deleting its provider deletes it.
CREATE TABLE oauth_connections (
    account_id      TEXT NOT NULL,
    provider        TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    access_sealed   BYTEA NOT NULL,
    refresh_sealed  BYTEA,
    -- NULL: the provider gave no expiry.
    expires_at      TIMESTAMPTZ,
    scopes          TEXT[] NOT NULL DEFAULT '{}',
    status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'failed')),
    last_error      TEXT,
    refreshed_at    TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, provider, user_id),
    FOREIGN KEY (account_id, provider)
        REFERENCES oauth_providers (account_id, name) ON DELETE CASCADE
);

-- The refresh sweep: active connections that can be refreshed, by expiry.
CREATE INDEX oauth_connections_due ON oauth_connections (expires_at)
    WHERE status = 'active' AND refresh_sealed IS NOT NULL;

-- An authorization the server started: the PKCE verifier it keeps until
-- the provider redirects back (found by the SHA-256 of the `state` it
-- sent; the state itself is not kept) and, when a tool call waits on it,
-- that call, whose turn resumes once every authorization its assistant
-- message waits on is completed (`resumed_at` is then set). One still
-- pending at its expiry is completed as `expired`.
CREATE TABLE oauth_authorizations (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    provider         TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    state_sha256     BYTEA NOT NULL UNIQUE,
    verifier_sealed  BYTEA NOT NULL,
    -- The waiting call: all NULL when none waits.
    agent_id         UUID,
    conversation_id  TEXT,
    message_id       TEXT,
    tool_call_id     TEXT,
    tool             TEXT,
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'authorized', 'failed', 'expired')),
    error            TEXT,
    expires_at       TIMESTAMPTZ NOT NULL,
    completed_at     TIMESTAMPTZ,
    resumed_at       TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    FOREIGN KEY (account_id, provider)
        REFERENCES oauth_providers (account_id, name) ON DELETE CASCADE,
    CHECK (num_nulls(agent_id, conversation_id, message_id, tool_call_id, tool) IN (0, 5)),
    CHECK ((status = 'pending') = (completed_at IS NULL))
);

-- Deleting a provider (or an account) finds its authorizations.
CREATE INDEX oauth_authorizations_by_provider ON oauth_authorizations (account_id, provider);
CREATE INDEX oauth_authorizations_by_message
    ON oauth_authorizations (account_id, conversation_id, message_id)
    WHERE conversation_id IS NOT NULL;
CREATE INDEX oauth_authorizations_due ON oauth_authorizations (expires_at)
    WHERE status = 'pending';
CREATE INDEX oauth_authorizations_unresumed ON oauth_authorizations (completed_at)
    WHERE status <> 'pending' AND resumed_at IS NULL AND conversation_id IS NOT NULL;
