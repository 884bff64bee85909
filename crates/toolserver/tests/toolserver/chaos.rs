//! Crash trials of detached turns (`toolserver-chaos`) at CI size: two real
//! servers on one database, a random one SIGKILLed and restarted per trial,
//! half the trials running two turns back to back on one conversation with
//! the kill between them; nothing may be lost, duplicated, stuck, leaked or
//! misordered. `make chaos` runs more.

use std::path::PathBuf;

use toolserver_chaos::{run, ChaosConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_trials_lose_nothing_and_keep_conversations_in_order() {
    let mut config = ChaosConfig::new(
        PathBuf::from(env!("CARGO_BIN_EXE_toolserver")),
        std::env::var("DATABASE_URL").expect("DATABASE_URL names a Postgres server"),
    );
    config.trials = std::env::var("CHAOS_TRIALS")
        .ok()
        .and_then(|trials| trials.parse().ok())
        .unwrap_or(20);
    config.seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()));
    config.back_to_back_share = 0.5;
    let trials = config.trials;
    eprintln!("chaos: seed {}", config.seed);
    let summary = run(config).await.expect("the chaos run is carried out");
    println!("{summary}");
    assert!(summary.is_clean(), "{summary}");
    // At half the trials, 20 without one happen once in a million runs.
    if trials >= 20 {
        assert!(
            summary.back_to_back > 0,
            "no back-to-back trial ran: {summary}"
        );
    }
}
