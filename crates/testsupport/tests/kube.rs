//! The fake Kubernetes API server, driven over plain HTTP and a raw WebSocket.
#![allow(clippy::expect_used)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use toolserver_testsupport::kube::{FakeCluster, FakeClusterOptions};
use toolserver_testsupport::wait::until_within;

const BOTH: &str = "v5.channel.k8s.io, v4.channel.k8s.io";
const PODS: &str = "/api/v1/namespaces/ns/pods";

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

struct Fixture {
    cluster: FakeCluster,
    root: tempfile::TempDir,
    http: reqwest::Client,
}

impl Fixture {
    /// A cluster whose `node` is `sh` and whose worker is a shell script.
    fn start() -> Self {
        let root = tempfile::Builder::new()
            .prefix("k")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let worker_dir = root.path().join("worker");
        std::fs::create_dir(&worker_dir).expect("worker dir");
        let script =
            "echo \"$SOCKET $CACHE_FILE $1\" > \"$1\"; pwd >> \"$1\"; echo hello; exec sleep 30";
        std::fs::write(worker_dir.join("main.js"), script).expect("worker script");
        let cluster = FakeCluster::start(FakeClusterOptions {
            node_binary: PathBuf::from("/bin/sh"),
            worker_dir,
            root: root.path().join("c"),
        });
        Self {
            cluster,
            root,
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cluster.url())
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request.send().await.expect("send a request");
        let status = response.status();
        (status, response.json().await.expect("a JSON body"))
    }

    async fn create_pod(&self, name: &str, command: &[&str]) -> Value {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "worker", "pod": name}},
            "spec": {"containers": [{
                "name": "main",
                "image": "toolserver/worker",
                "command": command,
                "env": [
                    {"name": "SOCKET", "value": "/tmp/w.sock"},
                    {"name": "CACHE_FILE", "value": "/cache/f"},
                ],
            }]},
        });
        let (status, pod) = self.send(self.http.post(self.url(PODS)).json(&pod)).await;
        assert_eq!(status, StatusCode::CREATED, "{pod}");
        pod
    }

    /// The host directory of the pod's `/tmp`.
    fn tmp(&self, pod: &Value) -> PathBuf {
        let uid = pod["metadata"]["uid"].as_str().expect("a uid");
        self.root.path().join("c/pods").join(uid).join("tmp")
    }

    async fn exec(
        &self,
        pod: &str,
        command: &[&str],
        stdin: bool,
        protocols: &str,
    ) -> Result<(Socket, String), tungstenite::Error> {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("stdout", "true")
            .append_pair("stderr", "true");
        if stdin {
            query.append_pair("stdin", "true");
        }
        for arg in command {
            query.append_pair("command", arg);
        }
        let url = self
            .url(&format!("{PODS}/{pod}/exec?{}", query.finish()))
            .replace("http://", "ws://");
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            protocols.parse().expect("a header value"),
        );
        let (socket, response) = tokio_tungstenite::connect_async(request).await?;
        let protocol = response
            .headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok((socket, protocol))
    }
}

async fn in_time<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .expect("in time")
}

/// The next binary frame, or `None` once the socket closes.
async fn frame(socket: &mut Socket) -> Option<Vec<u8>> {
    in_time(async {
        loop {
            match socket.next().await? {
                Ok(Message::Binary(data)) => return Some(data.to_vec()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await
}

async fn status(socket: &mut Socket) -> Value {
    let frame = frame(socket).await.expect("a status frame");
    assert_eq!(frame[0], 3, "{frame:?}");
    serde_json::from_slice(&frame[1..]).expect("a JSON status")
}

fn alive(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok()
}

/// How long a pod's processes get to do what a test waits for.
const PROMPTLY: Duration = Duration::from_secs(10);

async fn pid_in(file: &Path) -> u32 {
    until_within("the pid file to be written", PROMPTLY, || async {
        std::fs::read_to_string(file).is_ok_and(|text| text.ends_with('\n'))
    })
    .await;
    std::fs::read_to_string(file)
        .expect("the pid file")
        .trim()
        .parse()
        .expect("a pid")
}

/// Writes its pid to `main.pid` in its working directory, the pod's `/tmp`.
const MAIN: &[&str] = &["sh", "-c", "echo $$ > main.pid; exec sleep 30"];

#[tokio::test]
async fn pods_are_created_read_listed_patched_and_deleted() {
    let fixture = Fixture::start();
    let pod = fixture.create_pod("p1", MAIN).await;
    assert_eq!(pod["metadata"]["namespace"], "ns");
    assert_eq!(pod["metadata"]["uid"].as_str().map(str::len), Some(36));
    assert!(pod["metadata"]["creationTimestamp"].is_string());
    assert_eq!(pod["status"]["phase"], "Running");
    let ip = pod["status"]["podIP"].as_str().unwrap();
    assert!(ip.starts_with("127.") && ip.ends_with(".0.1"), "{ip}");
    let ready = &pod["status"]["conditions"][3];
    assert_eq!(
        (&ready["type"], &ready["status"]),
        (&json!("Ready"), &json!("True"))
    );
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
    let main = pid_in(&fixture.tmp(&pod).join("main.pid")).await;
    assert!(alive(main));
    fixture.create_pod("p2", &[]).await;

    let (status, again) = fixture
        .send(fixture.http.get(fixture.url(&format!("{PODS}/p1"))))
        .await;
    assert_eq!((status, &again), (StatusCode::OK, &pod));
    assert_eq!(fixture.cluster.pod("ns", "p1").as_ref(), Some(&pod));

    let list = |selector: &str| {
        fixture
            .http
            .get(fixture.url(PODS))
            .query(&[("labelSelector", selector)])
    };
    let (status, all) = fixture.send(list("app=worker")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all["kind"], "PodList");
    assert!(all["metadata"]["resourceVersion"].is_string());
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2));
    let (_, one) = fixture.send(list("app=worker,pod=p1")).await;
    assert_eq!(one["items"][0]["metadata"]["name"], "p1");
    assert_eq!(one["items"].as_array().map(Vec::len), Some(1));
    let (_, other) = fixture.send(list("pod!=p1")).await;
    assert_eq!(other["items"][0]["metadata"]["name"], "p2");
    let (status, _) = fixture.send(list("app in (worker)")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, duplicate) = fixture
        .send(fixture.http.post(fixture.url(PODS)).json(&pod))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(duplicate["reason"], "AlreadyExists");

    let merge = |body: Value| {
        fixture
            .http
            .patch(fixture.url(&format!("{PODS}/p1")))
            .header("Content-Type", "application/merge-patch+json")
            .json(&body)
    };
    let (status, patched) = fixture
        .send(merge(
            json!({"metadata": {"labels": {"pod": null, "leased": "yes"}}}),
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "worker", "leased": "yes"})
    );
    assert_eq!(patched["metadata"]["uid"], pod["metadata"]["uid"]);
    let revision = |object: &Value| -> u64 {
        object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse().ok())
            .expect("a resource version")
    };
    assert!(revision(&patched) > revision(&pod));
    let stale = json!({"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"], "labels": {"x": "y"}}});
    let (status, conflict) = fixture.send(merge(stale)).await;
    assert_eq!(
        (status, conflict["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Conflict"))
    );

    let delete = |preconditions: Value| {
        fixture
            .http
            .delete(fixture.url(&format!("{PODS}/p1")))
            .json(&json!({"preconditions": preconditions}))
    };
    let (status, conflict) = fixture.send(delete(json!({"uid": "another"}))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(conflict["code"], 409);
    let (status, deleted) = fixture
        .send(delete(json!({"uid": pod["metadata"]["uid"], "resourceVersion": patched["metadata"]["resourceVersion"]})))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(deleted["metadata"]["name"], "p1");
    assert!(!alive(main), "the main process dies with its pod");

    let (status, missing) = fixture
        .send(fixture.http.get(fixture.url(&format!("{PODS}/p1"))))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        missing,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "pods \"p1\" not found", "reason": "NotFound",
            "details": {"name": "p1", "kind": "pods"}, "code": 404})
    );

    let requests = fixture.cluster.requests();
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, PODS);
    assert_eq!(
        requests[0]
            .body
            .as_ref()
            .map(|body| &body["metadata"]["name"]),
        Some(&json!("p1"))
    );
    assert!(requests
        .iter()
        .any(|request| request.path == format!("{PODS}?labelSelector=app%3Dworker%2Cpod%3Dp1")));
}

#[tokio::test]
async fn other_kinds_are_stored_too() {
    let fixture = Fixture::start();
    let claims = "/api/v1/namespaces/ns/persistentvolumeclaims";
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "cache"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let (status, created) = fixture
        .send(fixture.http.post(fixture.url(claims)).json(&claim))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["status"]["phase"], "Bound");
    let (status, _) = fixture
        .send(fixture.http.get(fixture.url(&format!("{claims}/cache"))))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = fixture
        .send(fixture.http.delete(fixture.url(&format!("{claims}/cache"))))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = fixture
        .send(fixture.http.get(fixture.url(&format!("{claims}/cache"))))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let policies = "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies";
    let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-all"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}});
    fixture.cluster.insert(policies, policy);
    let (status, list) = fixture.send(fixture.http.get(fixture.url(policies))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["kind"], "NetworkPolicyList");
    assert_eq!(list["items"][0]["metadata"]["name"], "deny-all");
    assert_eq!(list["items"][0]["metadata"]["namespace"], "ns");
    let (status, _) = fixture
        .send(
            fixture
                .http
                .get(fixture.url(&format!("{policies}/deny-all"))),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    let (status, unknown) = fixture
        .send(
            fixture
                .http
                .get(fixture.url("/api/v1/namespaces/ns/secrets")),
        )
        .await;
    assert_eq!(
        (status, unknown["kind"].as_str()),
        (StatusCode::NOT_FOUND, Some("Status"))
    );
}

#[tokio::test]
async fn containers_see_their_paths_and_environment() {
    let fixture = Fixture::start();
    let command = [
        "/usr/bin/tini",
        "--",
        "node",
        "/opt/toolserver/worker/main.js",
        "/tmp/out",
    ];
    let pod = fixture.create_pod("w", &command).await;
    let tmp = fixture.tmp(&pod);
    until_within("the worker to write its file", PROMPTLY, || async {
        std::fs::read_to_string(tmp.join("out")).is_ok_and(|text| text.lines().count() == 2)
    })
    .await;
    let cache = fixture.root.path().join("c/claims/w/cache");
    let tmp_text = tmp.to_string_lossy();
    let expected = format!(
        "{tmp_text}/w.sock {}/f {tmp_text}/out\n{tmp_text}\n",
        cache.to_string_lossy()
    );
    assert_eq!(
        std::fs::read_to_string(tmp.join("out")).expect("the worker's file"),
        expected
    );
    let log = fixture
        .http
        .get(fixture.url(&format!("{PODS}/w/log")))
        .send()
        .await
        .expect("get the log")
        .text()
        .await
        .expect("the log");
    assert_eq!(log, "hello\n");

    let (mut socket, _) = fixture
        .exec(
            "w",
            &["sh", "-c", "echo kept > \"$CACHE_FILE\"; echo gone > f"],
            false,
            BOTH,
        )
        .await
        .expect("exec");
    assert_eq!(status(&mut socket).await["status"], "Success");
    let (status_code, _) = fixture
        .send(fixture.http.delete(fixture.url(&format!("{PODS}/w"))))
        .await;
    assert_eq!(status_code, StatusCode::OK);
    let pod = fixture.create_pod("w", MAIN).await;
    pid_in(&fixture.tmp(&pod).join("main.pid")).await;
    let (mut socket, _) = fixture
        .exec("w", &["sh", "-c", "cat \"$CACHE_FILE\"; ls"], false, BOTH)
        .await
        .expect("exec");
    let mut output = Vec::new();
    while let Some(frame) = frame(&mut socket).await {
        if frame[0] == 1 {
            output.extend_from_slice(&frame[1..]);
        }
    }
    assert_eq!(String::from_utf8_lossy(&output), "kept\nmain.pid\n");
}

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

#[tokio::test]
async fn a_lost_client_kills_its_command_but_not_what_it_detached() {
    let fixture = Fixture::start();
    let pod = fixture.create_pod("p", MAIN).await;
    let main = pid_in(&fixture.tmp(&pod).join("main.pid")).await;
    let command = [
        "sh",
        "-c",
        "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $$ $!; exec sleep 30",
    ];
    let (mut socket, _) = fixture
        .exec("p", &command, false, BOTH)
        .await
        .expect("exec");
    let output = frame(&mut socket).await.expect("the pids");
    let pids: Vec<u32> = String::from_utf8_lossy(&output[1..])
        .split_whitespace()
        .map(|pid| pid.parse().expect("a pid"))
        .collect();
    let [exec, detached] = pids[..] else {
        panic!("two pids, not {pids:?}");
    };
    until_within("setsid to detach and run sleep", PROMPTLY, || async {
        std::fs::read_to_string(format!("/proc/{detached}/comm"))
            .is_ok_and(|comm| comm == "sleep\n")
    })
    .await;
    drop(socket);
    until_within(
        "the exec'd command to die with its client",
        PROMPTLY,
        || async { !alive(exec) },
    )
    .await;
    assert!(alive(detached), "a detached process outlives its exec");
    assert!(alive(main));

    fixture.cluster.kill_pod_processes("ns", "p");
    assert!(
        !alive(detached) && !alive(main),
        "every process of the pod is killed"
    );
    assert_eq!(
        fixture.cluster.pod("ns", "p").expect("the pod")["status"]["phase"],
        "Running"
    );
}

#[tokio::test]
async fn dropping_the_cluster_kills_its_processes() {
    let fixture = Fixture::start();
    let pod = fixture.create_pod("p", MAIN).await;
    let main = pid_in(&fixture.tmp(&pod).join("main.pid")).await;
    let (mut socket, _) = fixture
        .exec(
            "p",
            &[
                "sh",
                "-c",
                "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!",
            ],
            false,
            BOTH,
        )
        .await
        .expect("exec");
    let output = frame(&mut socket).await.expect("the pid");
    let detached: u32 = String::from_utf8_lossy(&output[1..])
        .trim()
        .parse()
        .expect("a pid");
    assert!(alive(detached) && alive(main));
    let Fixture { cluster, root, .. } = fixture;
    drop(cluster);
    assert!(!alive(detached) && !alive(main));
    drop(root);
}
