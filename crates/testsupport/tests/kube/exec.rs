//! Exec over the WebSocket: output streamed as written with the exit code,
//! stdin fed until the client closes it, the v4 protocol for older
//! clients, and refusals before the upgrade.

use std::time::{Duration, Instant};

use futures::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::{frame, status, Fixture, Socket, BOTH, MAIN, PODS};

#[tokio::test]
async fn exec_streams_output_as_it_is_written_and_reports_the_exit_code() {
    let fixture = Fixture::start();
    let pod = fixture.create_pod("p", MAIN).await;
    let gated = [
        "sh",
        "-c",
        "echo a; until [ -e go ]; do sleep 0.02; done; echo b",
    ];
    let (mut socket, protocol) = fixture.exec("p", &gated, false, BOTH).await.expect("exec");
    assert_eq!(protocol, "v5.channel.k8s.io");
    assert_eq!(frame(&mut socket).await, Some(b"\x01a\n".to_vec()));
    std::fs::write(fixture.tmp(&pod).join("go"), "").expect("open the gate");
    assert_eq!(frame(&mut socket).await, Some(b"\x01b\n".to_vec()));
    assert_eq!(status(&mut socket).await["status"], "Success");

    let command = ["sh", "-c", "echo a; sleep 0.3; echo b; exit 3"];
    let (mut socket, _) = fixture
        .exec("p", &command, false, BOTH)
        .await
        .expect("exec");
    let started = Instant::now();
    assert_eq!(frame(&mut socket).await, Some(b"\x01a\n".to_vec()));
    let a = started.elapsed();
    assert_eq!(frame(&mut socket).await, Some(b"\x01b\n".to_vec()));
    let b = started.elapsed();
    assert!(
        b - a >= Duration::from_millis(100),
        "a came at {a:?}, b at {b:?}"
    );
    assert_eq!(
        status(&mut socket).await,
        json!({"metadata": {}, "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command [sh -c echo a; sleep 0.3; echo b; exit 3], exit code 3",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}})
    );
    assert_eq!(
        frame(&mut socket).await,
        None,
        "the socket closes after the status"
    );
    assert_eq!(fixture.cluster.exec_count("p"), 2);
    let path = format!(
        "{PODS}/p/exec?stdout=true&stderr=true&command=sh&command=-c&command={}",
        "echo+a%3B+sleep+0.3%3B+echo+b%3B+exit+3"
    );
    let requests = fixture.cluster.requests();
    assert!(requests
        .iter()
        .any(|request| request.method == "GET" && request.path == path));
}

#[tokio::test]
async fn exec_feeds_stdin_until_the_client_closes_it() {
    let fixture = Fixture::start();
    fixture.create_pod("p", MAIN).await;
    let command = ["sh", "-c", "cat; echo done >&2"];
    let (mut socket, _) = fixture.exec("p", &command, true, BOTH).await.expect("exec");
    socket
        .send(Message::binary(b"\x00hello\n".to_vec()))
        .await
        .expect("send stdin");
    assert_eq!(frame(&mut socket).await, Some(b"\x01hello\n".to_vec()));
    socket
        .send(Message::binary(b"\x00again".to_vec()))
        .await
        .expect("send stdin");
    assert_eq!(frame(&mut socket).await, Some(b"\x01again".to_vec()));
    socket
        .send(Message::binary(vec![255, 0]))
        .await
        .expect("close stdin");
    assert_eq!(frame(&mut socket).await, Some(b"\x02done\n".to_vec()));
    assert_eq!(
        status(&mut socket).await,
        json!({"metadata": {}, "status": "Success"})
    );
}

#[tokio::test]
async fn exec_speaks_v4_to_older_clients() {
    let fixture = Fixture::start();
    fixture.create_pod("p", MAIN).await;
    let (mut socket, protocol) = fixture
        .exec("p", &["echo", "hi"], false, "v4.channel.k8s.io")
        .await
        .expect("exec");
    assert_eq!(protocol, "v4.channel.k8s.io");
    assert_eq!(frame(&mut socket).await, Some(b"\x01hi\n".to_vec()));
    assert_eq!(status(&mut socket).await["status"], "Success");
}

#[tokio::test]
async fn exec_fails_before_upgrading_for_missing_or_finished_pods() {
    let fixture = Fixture::start();
    let refused = |result: Result<(Socket, String), tungstenite::Error>| match result {
        Err(tungstenite::Error::Http(response)) => {
            let body: Value =
                serde_json::from_slice(response.body().as_deref().unwrap_or_default())
                    .expect("a Status");
            (response.status().as_u16(), body)
        }
        Err(error) => panic!("unexpected error {error}"),
        Ok(_) => panic!("the exec was accepted"),
    };
    let (code, body) = refused(fixture.exec("nope", &["true"], false, BOTH).await);
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(body["message"], "pods \"nope\" not found");

    fixture.create_pod("p", MAIN).await;
    let (mut socket, _) = fixture
        .exec("p", &["/no/such/binary"], false, BOTH)
        .await
        .expect("exec");
    let failure = status(&mut socket).await;
    assert_eq!(failure["status"], "Failure");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|message| message.contains("/no/such/binary")),
        "{failure}"
    );

    fixture.cluster.set_pod_phase("ns", "p", "Failed");
    let pod = fixture.cluster.pod("ns", "p").expect("the pod");
    assert_eq!(pod["status"]["phase"], "Failed");
    assert_eq!(pod["status"]["conditions"][3]["status"], "False");
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], false);
    let (code, body) = refused(fixture.exec("p", &["true"], false, BOTH).await);
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(fixture.cluster.exec_count("p"), 1);
}
