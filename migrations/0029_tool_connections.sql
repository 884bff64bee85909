-- The OAuth provider whose end-user connection a tool acts through: named
-- by a bundle tool's manifest (its code's `ctx.fetch` may then use that
-- connection's token), derived from an HTTP tool's templates. A turn asks
-- its end user to authorize it before such a tool's call runs.
ALTER TABLE tools ADD COLUMN connection TEXT CHECK (connection ~ '^[A-Za-z0-9_]{1,64}$');
