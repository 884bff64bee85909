-- Readers following a turn stream register here, so a recorder announces
-- its appends (NOTIFY) only while someone follows the stream. A reader that
-- died without leaving keeps the count up: announcements then go out for
-- nobody, which costs a little and loses nothing.
ALTER TABLE turn_streams
    ADD COLUMN followers INTEGER NOT NULL DEFAULT 0 CHECK (followers >= 0);
