//! The reaper's part in approvals: approvals past their expiry are denied
//! (and their turns resumed), and turns whose approvals are all decided
//! but which did not resume (their process died, or the conversation was
//! busy) resume.

use toolserver_domain::AccountId;
use toolserver_store::approvals;
use toolserver_store::StoreError;

use super::DecideError;
use crate::lifecycle::Lifecycle;

/// Rows one sweep handles at most.
const BATCH: i64 = 100;

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApprovalSweep {
    /// Approvals denied because they expired undecided.
    pub expired: u64,
    /// Turns resumed after their resumption was lost.
    pub resumed: u64,
}

impl Lifecycle {
    /// One sweep of approvals (see the module).
    pub async fn reap_approvals(&self) -> Result<ApprovalSweep, StoreError> {
        let pool = self.pool();
        let mut sweep = ApprovalSweep::default();
        for approval in approvals::expired(pool, BATCH).await? {
            let Ok(account) = AccountId::parse(&approval.account_id) else {
                continue;
            };
            match self.expire(&account, &approval).await {
                Ok(_) => sweep.expired += 1,
                Err(DecideError::Store(err)) => return Err(err),
                Err(_) => {}
            }
        }
        let grace = self.harness().settings().lifecycle.approval_resume_grace;
        for (account, conversation, message) in
            approvals::unresumed(pool, grace.as_secs_f64(), BATCH).await?
        {
            let decided = approvals::of_message(pool, &account, &conversation, &message).await?;
            if self.resume_with(&decided).await.is_some() {
                sweep.resumed += 1;
            }
        }
        Ok(sweep)
    }
}
