//! Runs the subcommands (declared in [`crate::config::command_line`]):
//! `serve`, `worker`, `egress-proxy`, `migrate`, `openapi`, `routes-docs`,
//! `settings-docs`, `token`.

use crate::config;
pub use crate::config::command_line::{Cli, Command, TokenArgs};
use crate::{keys, routes_docs, startup};

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(config) => startup::serve(*config).await,
        Command::Worker(config) => startup::worker(*config).await,
        Command::EgressProxy(config) => startup::egress_proxy(*config).await,
        Command::Migrate(config) => startup::migrate_only(&config).await,
        Command::Openapi => {
            print!("{}", toolserver_api::contract_yaml()?);
            Ok(())
        }
        Command::RoutesDocs => {
            print!("{}", routes_docs::markdown()?);
            Ok(())
        }
        Command::SettingsDocs => {
            print!("{}", config::reference::markdown());
            Ok(())
        }
        Command::Token(args) => {
            let secret = match &args.auth.jwt_secret {
                Some(secret) => secret.expose().to_owned(),
                None => keys::load_or_create_secret(&startup::dev_secret_path(&args.database))?,
            };
            let token = keys::mint_hs256(
                &secret,
                &args.auth.jwt_account_claim,
                &args.account,
                args.ttl_secs,
                args.auth.jwt_issuer.as_deref(),
                args.auth.jwt_audience.as_deref(),
            )?;
            println!("{token}");
            Ok(())
        }
    }
}
