//! Graceful shutdown lets in-flight requests finish, then stops accepting.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tokio::sync::oneshot;

/// Serves `router` on a loopback port until the returned sender fires.
async fn start(
    router: Router,
    grace: Duration,
) -> (
    std::net::SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
    };
    let server = tokio::spawn(toolserver_api::server::serve(listener, router, stop, grace));
    (addr, stop_tx, server)
}

#[tokio::test]
async fn in_flight_requests_finish_after_shutdown_is_requested() {
    let (entered_tx, entered_rx) = oneshot::channel::<()>();
    let entered = std::sync::Mutex::new(Some(entered_tx));
    let entered = std::sync::Arc::new(entered);
    let router = Router::new().route(
        "/slow",
        get(move || {
            let entered = entered.clone();
            async move {
                if let Some(tx) = entered.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                "finished"
            }
        }),
    );
    let (addr, stop_tx, server) = start(router, Duration::from_secs(10)).await;
    let request = tokio::spawn(async move { reqwest::get(format!("http://{addr}/slow")).await });
    entered_rx.await.unwrap();
    stop_tx.send(()).unwrap();
    let response = request.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "finished");
    server.await.unwrap().unwrap();
    assert!(
        reqwest::get(format!("http://{addr}/slow")).await.is_err(),
        "no longer accepting after shutdown"
    );
}

#[tokio::test]
async fn grace_period_bounds_a_stuck_request() {
    let (entered_tx, entered_rx) = oneshot::channel::<()>();
    let entered = std::sync::Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let router = Router::new().route(
        "/stuck",
        get(move || {
            let entered = entered.clone();
            async move {
                if let Some(tx) = entered.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                std::future::pending::<()>().await;
                "never"
            }
        }),
    );
    let grace = Duration::from_millis(200);
    let (addr, stop_tx, server) = start(router, grace).await;
    let request = tokio::spawn(async move { reqwest::get(format!("http://{addr}/stuck")).await });
    entered_rx.await.unwrap();
    let stopping = std::time::Instant::now();
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stops once the grace period is over")
        .unwrap()
        .unwrap();
    assert!(
        stopping.elapsed() >= grace,
        "the stuck request had its grace period first"
    );
    request.abort();
}
