//! The processes of a pod's containers: the paths and environment they
//! see, a lost exec client killing its command but not what it detached,
//! and a dropped cluster killing them all.

use reqwest::StatusCode;
use toolserver_testsupport::wait::until_within;

use crate::{alive, frame, pid_in, status, Fixture, BOTH, MAIN, PODS, PROMPTLY};

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
