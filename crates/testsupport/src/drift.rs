//! Generated files committed to the repository (`openapi.yaml`, the
//! generated pages of `docs/`) must be exactly what the code generates now.

/// Panics unless the repository file at `path` (from the repository root)
/// equals `generated`, naming the first line that differs and `regenerate`,
/// the command that writes it again.
pub fn assert_committed(path: &str, generated: &str, regenerate: &str) {
    let full = concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_owned() + path;
    let committed = std::fs::read_to_string(full).unwrap_or_default();
    if generated != committed {
        let first_difference = generated
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(generated.lines().count().min(committed.lines().count()));
        panic!(
            "{path} is out of date (first difference at line {}); run `{regenerate}`",
            first_difference + 1
        );
    }
}
