#!/usr/bin/env bash
# The Kubernetes end-to-end suite on a local kind cluster (`make kind-test`):
# creates the cluster `toolserver-kind` (or reuses it), installs Calico so
# NetworkPolicy is enforced, builds and loads the server and runner images,
# applies deploy/kubernetes/overlays/kind, port-forwards the server and runs
# `cargo test -p toolserver-kubernetes --test kind_e2e -- --ignored`.
#
# Needs docker (with a reachable engine), kind, kubectl, curl and cargo; when
# one is missing it says so and exits 0 without running anything (exit 1
# with KIND_TEST_REQUIRED=1, as in CI).
#
# Settings (environment):
#   KIND_KEEP=1        keep the cluster afterwards (default: delete it at exit)
#   KIND_CLUSTER_NAME  cluster name (default toolserver-kind)
#   KIND_NODE_IMAGE    node image (default: Kubernetes 1.33, pinned by digest)
#   CALICO_VERSION     Calico release whose manifest is applied
#   KIND_TEST_ARGS     extra arguments for the test binary, e.g. a test name
#   KIND_TEST_REQUIRED=1  fail instead of skipping when a tool is missing
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

CLUSTER="${KIND_CLUSTER_NAME:-toolserver-kind}"
# The node image of kind v0.30.0 for Kubernetes 1.33 (the API version the
# crates are built against).
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.33.4@sha256:25a6018e48dfcaee478f4a59af81157a437f15e6e140bf103f85a2e7cd0cbbf2}"
CALICO_VERSION="${CALICO_VERSION:-v3.31.4}"
CALICO_MANIFEST="https://raw.githubusercontent.com/projectcalico/calico/${CALICO_VERSION}/manifests/calico.yaml"
SERVER_IMAGE="toolserver:kind"
RUNNER_IMAGE="toolserver-runner:kind"
OVERLAY="deploy/kubernetes/overlays/kind"
POD_SUBNET="10.244.0.0/16"
WAIT="300s"

log() {
  printf 'kind-test: %s\n' "$*" >&2
}

# --- prerequisites -----------------------------------------------------------
missing=()
if ! command -v docker >/dev/null 2>&1; then
  missing+=("docker: not on PATH")
elif ! docker info >/dev/null 2>&1; then
  missing+=("a Docker engine: 'docker info' cannot reach one")
fi
command -v kind >/dev/null 2>&1 || missing+=("kind: not on PATH (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)")
command -v kubectl >/dev/null 2>&1 || missing+=("kubectl: not on PATH")
command -v curl >/dev/null 2>&1 || missing+=("curl: not on PATH")
command -v cargo >/dev/null 2>&1 || missing+=("cargo: not on PATH")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "kind-test: SKIPPED: the Kubernetes end-to-end suite did not run."
  echo "kind-test: missing:"
  for what in "${missing[@]}"; do
    echo "kind-test:   - $what"
  done
  echo "kind-test: install what is missing and run 'make kind-test' again."
  if [ "${KIND_TEST_REQUIRED:-0}" = "1" ]; then
    echo "kind-test: KIND_TEST_REQUIRED=1, so a skip is a failure."
    exit 1
  fi
  exit 0
fi

WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/toolserver-kind.XXXXXX")"
export KUBECONFIG="$WORK_DIR/kubeconfig"
CLUSTER_UP=0
PF_PID=""

dump_state() {
  log "the cluster's state and logs follow"
  kubectl get nodes -o wide || true
  kubectl get pods --all-namespaces -o wide || true
  kubectl -n toolserver-runners get pods,persistentvolumeclaims,networkpolicies -o wide || true
  kubectl -n toolserver describe pods || true
  echo "----- server logs -----"
  kubectl -n toolserver logs deployment/toolserver --all-containers --tail=1000 || true
  echo "----- server logs, previous container -----"
  kubectl -n toolserver logs deployment/toolserver --all-containers --previous --tail=200 || true
  echo "----- egress proxy logs -----"
  kubectl -n toolserver logs deployment/toolserver-egress --all-containers --tail=300 || true
  echo "----- runner logs -----"
  kubectl -n toolserver-runners logs -l app.kubernetes.io/name=toolserver-runner \
    --all-containers --prefix --tail=200 || true
  echo "----- postgres logs -----"
  kubectl -n toolserver logs deployment/postgres --tail=100 || true
  echo "----- events -----"
  kubectl get events --all-namespaces --sort-by=.lastTimestamp | tail -n 100 || true
  if [ -f "$WORK_DIR/port-forward.log" ]; then
    echo "----- port-forward -----"
    cat "$WORK_DIR/port-forward.log" || true
  fi
}

cleanup() {
  local status=$?
  if [ -n "$PF_PID" ]; then
    kill "$PF_PID" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ "$CLUSTER_UP" -eq 1 ]; then
    dump_state
  fi
  if [ "$CLUSTER_UP" -eq 1 ]; then
    if [ "${KIND_KEEP:-0}" = "1" ]; then
      kind get kubeconfig --name "$CLUSTER" >"$WORK_DIR/kubeconfig.kept" 2>/dev/null || true
      log "keeping cluster $CLUSTER (KIND_KEEP=1); kubeconfig: $WORK_DIR/kubeconfig.kept"
    else
      log "deleting cluster $CLUSTER"
      kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    fi
  fi
  if [ "${KIND_KEEP:-0}" != "1" ]; then
    rm -rf "$WORK_DIR"
  fi
  exit "$status"
}
trap cleanup EXIT

# Compile the suite first: a build error should not cost a cluster.
log "building the end-to-end suite"
cargo test -p toolserver-kubernetes --test kind_e2e --no-run

# --- cluster -----------------------------------------------------------------
reused=0
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "reusing cluster $CLUSTER"
  reused=1
else
  log "creating cluster $CLUSTER ($KIND_NODE_IMAGE)"
  # No --wait: nodes stay NotReady until a CNI is installed.
  kind create cluster --name "$CLUSTER" --config deploy/kind/cluster.yaml \
    --image "$KIND_NODE_IMAGE" --kubeconfig "$KUBECONFIG"
fi
CLUSTER_UP=1
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"

# --- Calico ------------------------------------------------------------------
if kubectl -n kube-system get daemonset calico-node >/dev/null 2>&1; then
  log "Calico is installed"
else
  log "installing Calico $CALICO_VERSION"
  curl -fsSL --retry 3 "$CALICO_MANIFEST" -o "$WORK_DIR/calico.yaml"
  # The default IPv4 pool: the cluster's pod subnet.
  sed -i \
    -e 's|^\( *\)# - name: CALICO_IPV4POOL_CIDR$|\1- name: CALICO_IPV4POOL_CIDR|' \
    -e "s|^\\( *\\)#   value: \"192.168.0.0/16\"\$|\\1  value: \"$POD_SUBNET\"|" \
    "$WORK_DIR/calico.yaml"
  kubectl apply --server-side --force-conflicts -f "$WORK_DIR/calico.yaml" >/dev/null
  # kind nodes inherit the host's loose reverse-path filtering.
  kubectl -n kube-system set env daemonset/calico-node FELIX_IGNORELOOSERPF=true >/dev/null
fi
kubectl -n kube-system rollout status daemonset/calico-node --timeout="$WAIT"
kubectl -n kube-system rollout status deployment/calico-kube-controllers --timeout="$WAIT"
kubectl wait --for=condition=Ready nodes --all --timeout="$WAIT"
kubectl -n kube-system rollout status deployment/coredns --timeout="$WAIT"

# --- images --------------------------------------------------------------------
log "building $SERVER_IMAGE and $RUNNER_IMAGE"
docker build -f deploy/Dockerfile -t "$SERVER_IMAGE" .
docker build -f deploy/runner.Dockerfile -t "$RUNNER_IMAGE" .
kind load docker-image --name "$CLUSTER" "$SERVER_IMAGE" "$RUNNER_IMAGE"

# --- deploy ----------------------------------------------------------------------
log "applying $OVERLAY"
kubectl apply -k "$OVERLAY"
if [ "$reused" -eq 1 ]; then
  # Same tags, new images: restart what runs the old ones.
  kubectl -n toolserver-runners delete pods -l app.kubernetes.io/managed-by=toolserver \
    --ignore-not-found --wait=false
  kubectl -n toolserver rollout restart deployment/toolserver deployment/toolserver-egress
fi
kubectl -n toolserver rollout status deployment/postgres --timeout="$WAIT"
kubectl -n toolserver rollout status deployment/toolserver --timeout="$WAIT"
kubectl -n toolserver rollout status deployment/toolserver-egress --timeout="$WAIT"

# --- port-forward ------------------------------------------------------------------
kubectl -n toolserver port-forward --address 127.0.0.1 service/toolserver :8080 \
  >"$WORK_DIR/port-forward.log" 2>&1 &
PF_PID=$!
port=""
for _ in $(seq 1 60); do
  port="$(sed -nE 's/^Forwarding from 127\.0\.0\.1:([0-9]+) -> 8080$/\1/p' "$WORK_DIR/port-forward.log" | head -n 1)"
  [ -n "$port" ] && break
  sleep 0.5
done
if [ -z "$port" ]; then
  log "the port-forward to service/toolserver did not start"
  exit 1
fi
BASE_URL="http://127.0.0.1:$port"
ready=0
for _ in $(seq 1 60); do
  if curl -fsS -o /dev/null "$BASE_URL/readyz"; then
    ready=1
    break
  fi
  sleep 1
done
if [ "$ready" -ne 1 ]; then
  log "$BASE_URL/readyz did not answer"
  exit 1
fi

# Pods reach the host at the kind network's IPv4 gateway.
MODEL_HOST="$(docker network inspect kind \
  --format '{{range .IPAM.Config}}{{.Gateway}}{{"\n"}}{{end}}' | grep -v ':' | grep -m 1 . || true)"
if [ -z "$MODEL_HOST" ]; then
  log "no IPv4 gateway on the docker network 'kind'"
  exit 1
fi
JWT_SECRET="$(sed -n 's/^TOOLSERVER_JWT_SECRET=//p' "$OVERLAY/secrets.env")"

# --- the suite -------------------------------------------------------------------
log "running the suite against $BASE_URL (model host $MODEL_HOST)"
read -r -a extra_args <<<"${KIND_TEST_ARGS:-}"
TOOLSERVER_KIND_URL="$BASE_URL" \
TOOLSERVER_KIND_JWT_SECRET="$JWT_SECRET" \
TOOLSERVER_KIND_MODEL_HOST="$MODEL_HOST" \
  cargo test -p toolserver-kubernetes --test kind_e2e -- --ignored --test-threads=1 "${extra_args[@]}"
log "the Kubernetes end-to-end suite passed"
