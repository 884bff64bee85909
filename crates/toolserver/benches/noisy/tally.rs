//! Answers to one account's requests, counted as they come.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use reqwest::header::RETRY_AFTER;
use reqwest::Response;

/// Answers to one account's requests, counted as they come.
pub(crate) struct Tally {
    /// Answers by HTTP status (index), 2xx included.
    pub(crate) by_status: Vec<AtomicU64>,
    /// Answers by status that carried no `Retry-After`.
    pub(crate) without_retry_after: Vec<AtomicU64>,
    /// 2xx answers whose call failed (a tool error) or whose turn did not
    /// finish.
    pub(crate) failed_results: AtomicU64,
    /// Requests that got no answer (connection or body errors).
    pub(crate) unanswered: AtomicU64,
    /// The first body of each kind of failure, for the report.
    pub(crate) examples: Mutex<Vec<(String, String)>>,
}

impl Tally {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            by_status: (0..600).map(|_| AtomicU64::new(0)).collect(),
            without_retry_after: (0..600).map(|_| AtomicU64::new(0)).collect(),
            failed_results: AtomicU64::new(0),
            unanswered: AtomicU64::new(0),
            examples: Mutex::new(Vec::new()),
        })
    }

    /// Counts one answer; `failed` for a 2xx whose call or turn failed,
    /// `body` to keep as an example of a failure.
    pub(crate) fn answer(&self, status: u16, retry_after: bool, failed: bool, body: &[u8]) {
        let at = usize::from(status).min(599);
        self.by_status[at].fetch_add(1, Ordering::Relaxed);
        if !retry_after {
            self.without_retry_after[at].fetch_add(1, Ordering::Relaxed);
        }
        if failed {
            self.failed_results.fetch_add(1, Ordering::Relaxed);
        }
        if failed || !(200..300).contains(&status) {
            let kind = if failed {
                format!("{status} (failed)")
            } else {
                status.to_string()
            };
            self.example(kind, body);
        }
    }

    pub(crate) fn unanswered(&self, error: &reqwest::Error) {
        self.unanswered.fetch_add(1, Ordering::Relaxed);
        self.example("no answer".to_owned(), error.to_string().as_bytes());
    }

    pub(crate) fn example(&self, kind: String, body: &[u8]) {
        let mut examples = self.examples.lock().unwrap();
        if !examples.iter().any(|(of, _)| *of == kind) {
            let text: String = String::from_utf8_lossy(body).chars().take(240).collect();
            examples.push((kind, text));
        }
    }

    pub(crate) fn count(&self, status: usize) -> u64 {
        self.by_status[status].load(Ordering::Relaxed)
    }

    pub(crate) fn count_without_retry_after(&self, status: usize) -> u64 {
        self.without_retry_after[status].load(Ordering::Relaxed)
    }

    pub(crate) fn accepted(&self) -> u64 {
        (200..300).map(|s| self.count(s)).sum()
    }

    /// Non-2xx answers.
    pub(crate) fn refused(&self) -> u64 {
        (0..600)
            .filter(|s| !(200..300).contains(s))
            .map(|s| self.count(s))
            .sum()
    }

    /// Non-2xx answers other than a 429 or 503 with `Retry-After`.
    pub(crate) fn improper_refusals(&self) -> u64 {
        let proper: u64 = [429, 503]
            .iter()
            .map(|&s| self.count(s) - self.count_without_retry_after(s))
            .sum();
        self.refused() - proper
    }

    /// 5xx answers other than a 503 with `Retry-After`.
    pub(crate) fn server_errors(&self) -> u64 {
        let total: u64 = (500..600).map(|s| self.count(s)).sum();
        total - (self.count(503) - self.count_without_retry_after(503))
    }

    /// Prints the counts of `who`'s answers.
    pub(crate) fn print(&self, who: &str, seconds: f64) {
        let accepted = self.accepted();
        println!(
            "{who}: {accepted} accepted (2xx, {:.1}/s; {} of them failed), {} refused (non-2xx), {} without an answer",
            accepted as f64 / seconds,
            self.failed_results.load(Ordering::Relaxed),
            self.refused(),
            self.unanswered.load(Ordering::Relaxed),
        );
        let refusals: Vec<String> = (0..600)
            .filter(|s| !(200..300).contains(s) && self.count(*s) > 0)
            .map(|s| {
                format!(
                    "{s}: {} ({} without Retry-After)",
                    self.count(s),
                    self.count_without_retry_after(s)
                )
            })
            .collect();
        if !refusals.is_empty() {
            println!("{who}: refusals by status: {}", refusals.join(", "));
        }
        let without_retry_after: u64 = (0..600)
            .filter(|s| !(200..300).contains(s))
            .map(|s| self.count_without_retry_after(s))
            .sum();
        println!(
            "{who}: refusals without Retry-After: {without_retry_after}; refusals other than 429/503 with Retry-After: {}; 5xx other than 503 with Retry-After: {}",
            self.improper_refusals(),
            self.server_errors()
        );
        for (kind, body) in self.examples.lock().unwrap().iter() {
            println!("{who}: e.g. {kind}: {body}");
        }
    }
}

/// The status of `response` and whether it carries `Retry-After`.
pub(crate) fn status_of(response: &Response) -> (u16, bool) {
    (
        response.status().as_u16(),
        response.headers().contains_key(RETRY_AFTER),
    )
}

/// Whether a call's JSON answer reports a tool error.
pub(crate) fn call_failed(body: &[u8]) -> bool {
    body.windows(8).any(|w| w == b"\"error\":")
}
