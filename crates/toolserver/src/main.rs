//! Entry point of the `toolserver` binary.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toolserver::run(toolserver::config::parse_or_exit()).await
}
