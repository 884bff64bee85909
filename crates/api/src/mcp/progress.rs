//! Progress notifications of one call: each snapshot a tool yields, when
//! the call's client asked for progress (its request has a `progressToken`);
//! `progress` counts the snapshots and `message` is the snapshot as JSON.

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::Value;

/// Progress notifications of one call, when its client asked for them.
pub struct Progress<'a> {
    context: &'a RequestContext<RoleServer>,
    token: Option<ProgressToken>,
    sent: u32,
}

impl<'a> Progress<'a> {
    /// The progress of the call `context` belongs to.
    pub fn of(context: &'a RequestContext<RoleServer>) -> Self {
        let token = context.meta.get_progress_token();
        Self {
            context,
            token,
            sent: 0,
        }
    }

    /// Sends `value` (a snapshot the tool yielded) as the next progress.
    pub async fn send(&mut self, value: &Value) {
        self.sent += 1;
        let Some(token) = &self.token else { return };
        let mut progress = ProgressNotificationParam::new(token.clone(), f64::from(self.sent));
        progress.message = Some(value.to_string());
        if let Err(err) = self.context.peer.notify_progress(progress).await {
            tracing::debug!(error = %err, "could not send a progress notification");
        }
    }
}
