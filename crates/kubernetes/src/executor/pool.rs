//! The executor's warm pool (`warm.rs`), as the server and tests drive it.

use toolserver_sandbox::SandboxError;

use super::KubernetesExecutor;

impl KubernetesExecutor {
    /// Keeps `size` warm pods from now on (0: none, and calls start as
    /// without a pool), and tends them every [`crate::warm::TICK`]: abandoned
    /// warm pods of any server are deleted, the first time at once. Under a
    /// runner budget, call it once the budget holds this executor
    /// ([`toolserver_sandbox::Executor::govern_warm`]), so warm pods count
    /// against its cap.
    pub fn start_warm_pool(&self, size: usize) {
        self.inner.pool.start(size);
    }

    /// Keeps no warm pods from now on and deletes those this server kept,
    /// ready or starting, rather than leave them to another server's sweep:
    /// for a server that is stopping.
    pub async fn stop_warm_pool(&self) {
        self.inner.pool.stop().await;
    }

    /// The names of this server's ready warm pods, oldest first.
    pub fn warm_pods(&self) -> Vec<String> {
        self.inner.pool.ready()
    }

    /// Tends the warm pool once, as it does every [`crate::warm::TICK`]:
    /// vouches for its pods, replaces those that died or went away, and
    /// deletes abandoned warm pods of any server.
    pub async fn tend_warm_pool(&self) -> Result<(), SandboxError> {
        self.inner.pool.tend().await
    }
}
