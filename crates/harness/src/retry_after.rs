//! The wait an HTTP answer asks for before another try.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// How long the answer's headers ask to wait before another try:
/// `retry-after-ms`, or `Retry-After` in seconds or as an HTTP date.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    if let Some(millis) = header("retry-after-ms").and_then(|value| value.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(millis / 1000.0).ok();
    }
    let value = header("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_its_three_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        let cases = [
            (
                headers(&[("retry-after", "3")]),
                Some(Duration::from_secs(3)),
            ),
            (
                headers(&[("retry-after", "0.5")]),
                Some(Duration::from_millis(500)),
            ),
            (
                headers(&[("retry-after-ms", "250"), ("retry-after", "9")]),
                Some(Duration::from_millis(250)),
            ),
            (
                headers(&[(
                    "retry-after",
                    &httpdate::fmt_http_date(now + Duration::from_secs(7)),
                )]),
                Some(Duration::from_secs(7)),
            ),
            (
                headers(&[(
                    "retry-after",
                    &httpdate::fmt_http_date(now - Duration::from_secs(7)),
                )]),
                Some(Duration::ZERO),
            ),
            (headers(&[("retry-after", "soon")]), None),
            (headers(&[("retry-after", "-1")]), None),
            (HeaderMap::new(), None),
        ];
        for (headers, expected) in cases {
            assert_eq!(retry_after(&headers, now), expected, "{headers:?}");
        }
    }
}
