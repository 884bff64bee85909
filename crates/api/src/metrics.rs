//! Request metrics: a count and a latency histogram (time to the response
//! head) per route template, method and status. Labels never carry ids: the
//! route is the template the request matched (`/tools/{toolId}`), or
//! `unmatched`, and an unusual method is `other`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::admission::Refusal;

/// Requests answered, by `route`, `method` and `status`.
pub const REQUESTS: &str = "toolserver_http_requests_total";
/// Seconds to the response head, by `route`, `method` and `status`.
pub const REQUEST_SECONDS: &str = "toolserver_http_request_duration_seconds";

/// Requests refused by admission, by `limit` (and `account`, when an
/// operator turned that label on).
pub const REFUSALS: &str = "toolserver_admission_refusals_total";

/// Whether refusals carry an `account` label (off: one series per limit,
/// whatever the number of accounts).
static ACCOUNT_LABEL: AtomicBool = AtomicBool::new(false);

/// Turns the `account` label of per-account series on or off.
pub fn label_accounts(on: bool) {
    ACCOUNT_LABEL.store(on, Ordering::Relaxed);
}

/// Counts one refusal.
pub fn refused(refusal: &Refusal) {
    let limit = ("limit", refusal.kind.name().to_owned());
    if ACCOUNT_LABEL.load(Ordering::Relaxed) {
        let account = ("account", refusal.account.as_str().to_owned());
        metrics::counter!(REFUSALS, &[limit, account]).increment(1);
    } else {
        metrics::counter!(REFUSALS, &[limit]).increment(1);
    }
}

/// Gives the request series their help text (once the recorder is installed).
pub fn describe() {
    metrics::describe_counter!(
        REQUESTS,
        "HTTP requests answered, by route template, method and status."
    );
    metrics::describe_histogram!(
        REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "Seconds from a request to its response head, by route template, method and status."
    );
    metrics::describe_counter!(
        REFUSALS,
        "Requests refused by admission, by the limit reached."
    );
}

/// Counts and times each request under its route template.
pub async fn record_request(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = method_label(req.method());
    let started = Instant::now();
    let response = next.run(req).await;
    let labels = [
        ("route", route),
        ("method", method.to_owned()),
        ("status", response.status().as_u16().to_string()),
    ];
    metrics::counter!(REQUESTS, &labels).increment(1);
    metrics::histogram!(REQUEST_SECONDS, &labels).record(started.elapsed().as_secs_f64());
    response
}

/// The method as a label: the standard ones by name, anything else `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusual_methods_share_one_label() {
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        let custom = Method::from_bytes(b"PURGE").expect("a valid method");
        assert_eq!(method_label(&custom), "other");
    }
}
