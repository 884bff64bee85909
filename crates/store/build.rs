//! Rebuilds the crate when a migration is added or removed: `sqlx::migrate!`
//! embeds the files it finds, but tracks changes only to those files.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
