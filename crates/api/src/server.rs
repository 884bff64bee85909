//! Serving with graceful shutdown: when `shutdown` resolves the listener
//! closes, in-flight requests get up to `grace` to finish, and whatever is
//! still running after that is dropped.

use std::future::Future;
use std::time::Duration;

use axum::serve::ListenerExt;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `app` on `listener` until `shutdown` resolves and requests drain (or `grace` passes).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let (stopping_tx, stopping_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stopping_tx.send(true);
    });
    let mut on_stop = stopping_rx.clone();
    // Streamed responses are many small writes; without TCP_NODELAY, Nagle's
    // algorithm holds each one until the client's delayed ACK (~40 ms).
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY");
        }
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = on_stop.wait_for(|stopping| *stopping).await;
        tracing::info!("shutdown requested; draining in-flight requests");
    });
    let mut on_stop = stopping_rx;
    let deadline = async move {
        let _ = on_stop.wait_for(|stopping| *stopping).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = server => result,
        () = deadline => {
            tracing::warn!(grace_secs = grace.as_secs(), "grace period over; dropping unfinished requests");
            Ok(())
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn termination_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
