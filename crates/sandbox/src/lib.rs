//! Where uploaded tool code runs. A runner is a long-lived Node worker
//! (`worker/worker.mjs`) serving HTTP on a unix socket; one runner serves one
//! (account, tool) reservation key. The [`Executor`] trait is what callers
//! use; [`LocalExecutor`] runs workers as local child processes (the default).
//! Backends share the worker protocol ([`WorkerConnection`]) and the call
//! relay ([`spawn_relay`]); the Kubernetes backend lives in its own crate.
//! [`RunnerBudget`] holds any backend to caps on the runners live at once.

mod assets;
mod budget;
mod client;
mod egress;
mod error;
mod executor;
mod identity;
mod limits;
mod local;
mod meter;
pub mod metrics;
mod protocol;
mod relay;
mod reservation;
mod seccomp;
pub mod timings;

pub use assets::WorkerAssets;
pub use budget::{AccountRunnerCaps, BudgetSettings, FixedRunnerCaps, RunnerBudget};
pub use client::{WorkerClient, WorkerConnection};
pub use egress::{EgressGrant, EgressKey, EgressProxy, EgressScope, EgressSettings};
pub use error::SandboxError;
pub use executor::{
    Executor, FrameStream, LaunchedCall, RunnerExit, RunnerInfo, RunnerUsage, StopListener,
    WarmRoom, WarmRoomSlot,
};
pub use identity::{RUNNER_UID_BASE, RUNNER_UID_COUNT};
pub use limits::{CallWatch, Limit, LimitBreach, PendingChecks, RunnerLimits, Settling};
pub use local::{IsolationMode, LocalExecutor, LocalSettings};
pub use protocol::{BundleRef, FetchAccess, Frame, InvokeRequest};
pub use relay::{forward_frames, spawn_relay, RunnerControl, WorkerAnswer};
pub use reservation::ReservationKey;
