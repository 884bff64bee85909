//! Entry point of the `toolserver` binary.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toolserver::run(toolserver::Cli::parse()).await
}
