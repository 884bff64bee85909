//! Tests of the Kubernetes backend that run anywhere: the exact requests it
//! makes against a mocked API (`mocked_api`), and the exec transport and the
//! whole executor against a local server that speaks the API's exec
//! protocol and runs real Node workers (`exec_transport`), and the warm
//! pool of runner pods there (`warm_pool`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod exec_transport;
mod mock;
mod mocked_api;
mod shared_egress;
mod warm_pool;
