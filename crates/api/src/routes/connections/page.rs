//! The pages a browser sees at the end of an authorization: connected, or
//! why not. Plain HTML with nothing to load.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

/// The page of a connection made to `provider`.
pub fn connected(provider: &str) -> Response {
    render(
        StatusCode::OK,
        &format!("Connected to {}", escape(provider)),
        "You can close this window and return to the conversation; it carries on by itself.",
    )
}

/// The page of an authorization that failed with `status` and `message`.
pub fn failed(status: StatusCode, message: &str) -> Response {
    render(
        status,
        "The connection was not made",
        &format!("{} Start again from the conversation.", escape(message)),
    )
}

fn render(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title></head><body><h1>{title}</h1><p>{detail}</p></body></html>"
    );
    (status, Html(body)).into_response()
}

/// `text` with HTML's special characters escaped.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_message_is_escaped() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
    }
}
