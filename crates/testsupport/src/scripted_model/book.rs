//! What the scripted model keeps, by model id: the scripts, the responders
//! and the requests received.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::http::HeaderMap;
use serde_json::Value;

use super::{Reply, Responder};

/// One request received: its body and headers.
pub(super) struct Received {
    /// The JSON body.
    pub(super) body: Value,
    /// The HTTP headers.
    pub(super) headers: HeaderMap,
}

/// Scripts, responders and the requests received, by model id.
#[derive(Default)]
pub(super) struct Book {
    /// The replies of each model id, one per step.
    pub(super) scripts: HashMap<String, Arc<[Reply]>>,
    /// The responders of the model ids answered by one.
    pub(super) responders: HashMap<String, Responder>,
    /// The requests each scripted model id received, in arrival order.
    pub(super) requests: HashMap<String, Vec<Received>>,
}

/// The book the server and its handle share.
pub(super) type Shared = Arc<Mutex<Book>>;

/// The book, locked; a panic elsewhere while it was held leaves it usable.
pub(super) fn lock(book: &Shared) -> MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(PoisonError::into_inner)
}
