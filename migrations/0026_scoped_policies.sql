-- Policies that narrow for one end user or one conversation of an account:
-- a layer below the account's and the agent's (see docs/policies.md). Empty
-- text has no say.

CREATE TABLE scoped_policies (
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    scope       TEXT NOT NULL CHECK (scope IN ('user', 'conversation')),
    scope_id    TEXT NOT NULL,
    policies    TEXT NOT NULL,
    version     BIGINT NOT NULL DEFAULT 1 CHECK (version >= 1),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, scope, scope_id)
);
