//! A fake Kubernetes API server that also plays the kubelet, for tests of code
//! that drives pods through a real Kubernetes client.
//!
//! Emulated: namespaced create, get, list, merge-patch and delete of pods,
//! persistent volume claims and network policies, kept in memory as JSON (with
//! uids, resource versions, creation timestamps, equality label and field
//! selectors, delete preconditions and `metav1.Status` errors); pods that are
//! `Running` and `Ready` as soon as they are created, whose first container's
//! command runs as a local process whose output is the pod's `log`; and
//! `exec` over a WebSocket speaking the `v5.channel.k8s.io` (or
//! `v4.channel.k8s.io`) channel protocol, which runs the command as a local
//! child process and streams its output.
//!
//! A container is emulated by path mapping alone: an argument or environment
//! value that starts with `/opt/toolserver/worker`, `/tmp` or `/cache` is
//! rewritten to a host directory (`/tmp` one per pod, `/cache` one per pod
//! name, kept across re-creation); paths inside a value, such as in a shell
//! script passed to `sh -c`, are not. `node` becomes the configured binary,
//! and every process runs in the pod's `/tmp`. That working directory is how
//! a pod's processes, detached ones included, are found when they must die.
//!
//! Not emulated: authentication, scheduling, images, any isolation (no
//! namespaces, cgroups, seccomp, resource limits; network policies are stored,
//! not enforced), container restarts and phase changes when the main process
//! exits (a pod stays `Running` until [`FakeCluster::set_pod_phase`]),
//! `watch`, `PUT`, JSON and server-side apply patches, graceful deletion and
//! finalizers, `tty`, and `valueFrom` environment variables.

mod answers;
mod exec;
mod network;
mod objects;
mod pods;
mod processes;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::Value;
use tokio::sync::watch;

use network::PodNetwork;
use processes::PodRuntime;

/// Where the fake kubelet finds what a pod's containers need on the host.
#[derive(Debug, Clone)]
pub struct FakeClusterOptions {
    /// The binary that runs for a container's `node`.
    pub node_binary: PathBuf,
    /// The host directory behind the image path `/opt/toolserver/worker`.
    pub worker_dir: PathBuf,
    /// Scratch root for the pods' directories; keep it short, since unix
    /// socket paths under a pod's `/tmp` must stay under 108 bytes.
    pub root: PathBuf,
}

/// One request the fake cluster received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The HTTP method, e.g. `POST`.
    pub method: String,
    /// The path and query as sent, less empty query pairs: e.g.
    /// `/api/v1/namespaces/ns/pods?labelSelector=a%3Db` for
    /// `/api/v1/namespaces/ns/pods?&labelSelector=a%3Db`.
    pub path: String,
    /// The body, when it was JSON.
    pub body: Option<Value>,
}

/// A fake Kubernetes API server on loopback; stops and kills every process it
/// started when dropped.
pub struct FakeCluster {
    url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
    _stop: watch::Sender<()>,
}

/// What the handlers share.
struct Shared {
    options: FakeClusterOptions,
    state: Mutex<Store>,
    /// Ends when the cluster is dropped: exec sessions then kill their process.
    shutdown: watch::Receiver<()>,
}

/// The cluster's objects, processes and records.
struct Store {
    /// Objects by collection path (e.g. `/api/v1/namespaces/ns/pods`), then name.
    objects: BTreeMap<String, BTreeMap<String, Value>>,
    revision: u64,
    requests: Vec<RecordedRequest>,
    execs: HashMap<String, usize>,
    /// The processes side of each pod, by namespace and name.
    pods: HashMap<(String, String), PodRuntime>,
    /// Where the pods' addresses come from.
    network: PodNetwork,
}

impl Store {
    /// The next resource version.
    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Store> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl FakeCluster {
    /// Serves on a free loopback port from a background task.
    ///
    /// # Panics
    /// Outside a Tokio runtime, or when the root or a port cannot be had.
    pub fn start(options: FakeClusterOptions) -> Self {
        std::fs::create_dir_all(&options.root).expect("create the fake cluster's root");
        let root = options
            .root
            .canonicalize()
            .expect("resolve the fake cluster's root");
        let options = FakeClusterOptions { root, ..options };
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind a loopback port for the fake cluster");
        listener
            .set_nonblocking(true)
            .expect("make the fake cluster's listener non-blocking");
        let address = listener.local_addr().expect("the fake cluster's address");
        let listener = tokio::net::TcpListener::from_std(listener)
            .expect("start the fake cluster inside a Tokio runtime");
        let (stop, shutdown) = watch::channel(());
        let shared = Arc::new(Shared {
            options,
            state: Mutex::new(Store {
                objects: BTreeMap::new(),
                revision: 0,
                requests: Vec::new(),
                execs: HashMap::new(),
                pods: HashMap::new(),
                network: PodNetwork::take(),
            }),
            shutdown,
        });
        let app = router(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{address}"),
            shared,
            server,
            _stop: stop,
        }
    }

    /// The base URL for a client, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Stores `object` in the collection at `collection` (e.g.
    /// `/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies`), stamped
    /// like a created object; a pod stored so runs no process.
    ///
    /// # Panics
    /// When the path names no namespace or the object has no `metadata.name`.
    pub fn insert(&self, collection: &str, mut object: Value) {
        let collection = collection.trim_end_matches('/');
        let namespace = collection
            .split('/')
            .skip_while(|segment| *segment != "namespaces")
            .nth(1)
            .expect("a namespaced collection path");
        let name = object["metadata"]["name"]
            .as_str()
            .expect("an object with metadata.name")
            .to_owned();
        let mut state = self.shared.lock();
        objects::stamp(&mut state, &mut object, namespace);
        state
            .objects
            .entry(collection.to_owned())
            .or_default()
            .insert(name, object);
    }

    /// Every request received, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many exec sessions were opened into pods named `pod`.
    pub fn exec_count(&self, pod: &str) -> usize {
        self.shared.lock().execs.get(pod).copied().unwrap_or(0)
    }

    /// The pod `namespace/name` as the API would return it.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.shared
            .lock()
            .objects
            .get(&pods::collection(namespace))
            .and_then(|pods| pods.get(name))
            .cloned()
    }

    /// Sets the pod's phase (e.g. `Succeeded`, `Failed`) with matching
    /// conditions and container states; a finished phase kills its processes.
    ///
    /// # Panics
    /// When the pod does not exist.
    pub fn set_pod_phase(&self, namespace: &str, name: &str, phase: &str) {
        let dir = {
            let mut state = self.shared.lock();
            pods::set_phase(&mut state, namespace, name, phase)
                .expect("set the phase of an existing pod")
        };
        if let Some(dir) = dir {
            processes::kill_all_in(&dir);
        }
    }

    /// Kills every process of the pod, as if its container's processes died;
    /// the pod object is left as it is.
    ///
    /// # Panics
    /// When the pod has no processes side (it does not exist, or was inserted).
    pub fn kill_pod_processes(&self, namespace: &str, name: &str) {
        let dir = self
            .shared
            .lock()
            .pods
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .map(PodRuntime::stop)
            .expect("kill the processes of an existing pod");
        processes::kill_all_in(&dir);
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.server.abort();
        let dirs: Vec<PathBuf> = self
            .shared
            .lock()
            .pods
            .values_mut()
            .map(PodRuntime::stop)
            .collect();
        for dir in dirs {
            processes::kill_all_in(&dir);
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    let collection = get(objects::list).post(objects::create);
    let item = get(objects::read)
        .delete(objects::remove)
        .patch(objects::patch);
    Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/{resource}",
            collection.clone(),
        )
        .route(
            "/api/v1/namespaces/{namespace}/{resource}/{name}",
            item.clone(),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}",
            collection,
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}",
            item,
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/exec",
            get(exec::exec).post(exec::exec),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/log",
            get(pods::log),
        )
        .fallback(answers::unknown)
        .layer(middleware::from_fn_with_state(shared.clone(), record))
        .with_state(shared)
}

/// Keeps a copy of every request before it is handled.
async fn record(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let query: Vec<&str> = parts
        .uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .collect();
    let path = match query[..] {
        [] => parts.uri.path().to_owned(),
        _ => format!("{}?{}", parts.uri.path(), query.join("&")),
    };
    shared.lock().requests.push(RecordedRequest {
        method: parts.method.to_string(),
        path,
        body: serde_json::from_slice(&bytes).ok(),
    });
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
