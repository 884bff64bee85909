//! The API's objects: pods created, read, listed, patched and deleted, and
//! objects of other kinds stored too.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::{alive, pid_in, Fixture, MAIN, PODS};

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
