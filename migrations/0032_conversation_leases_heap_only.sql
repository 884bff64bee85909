-- A turn updates its conversation's row twice: when it takes the lease and
-- when it stores its messages and frees it. Neither update changes an
-- indexed column when the server taking the lease is the one that last
-- held it, so both can be heap-only (no new index entries, less WAL, less
-- vacuum): freeing a lease now leaves `lease_process` naming the process
-- that last held it (whether a lease is held is `active_turn`), and pages
-- keep room for a row's next version.

ALTER TABLE conversations SET (fillfactor = 80);
