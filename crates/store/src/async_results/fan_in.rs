//! A dispatch group's fan-in: each settled sibling releases its place,
//! and the last one of a sealed group enqueues its continuation, once.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{jobs, StoreError};

/// One sibling of the group settled.
pub(super) async fn release_from_group(
    tx: &mut PgConnection,
    group_id: Uuid,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE dispatch_groups SET remaining = remaining - 1 WHERE id = $1")
        .bind(group_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Marks the group continued and enqueues its continuation if it is sealed
/// with no sibling remaining and not continued yet. The caller's transaction
/// holds the group row lock (it has just updated the row).
pub(super) async fn enqueue_if_ready(
    tx: &mut PgConnection,
    group_id: Uuid,
) -> Result<bool, StoreError> {
    let ready: Option<(String, Uuid)> = sqlx::query_as(
        "UPDATE dispatch_groups SET continued_at = now() \
         WHERE id = $1 AND sealed_at IS NOT NULL AND remaining = 0 AND continued_at IS NULL \
         RETURNING account_id, turn_id",
    )
    .bind(group_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((account_id, turn_id)) = ready else {
        return Ok(false);
    };
    jobs::insert_continue(tx, &account_id, turn_id, group_id).await?;
    Ok(true)
}
