#!/usr/bin/env bash
# Makes sure what the tests need is present and running: PostgreSQL on
# 127.0.0.1:5432 (with pg_stat_statements loaded), NATS on 127.0.0.1:4222,
# the s3s-fs S3-compatible server binary, Node.js, the AI SDK client test's
# packages (and the turns bench's AI SDK peer's), Chromium and the
# browser test's packages, the tool CLI's packages, the MCP clients (the
# TypeScript SDK's packages and a virtualenv with the Python SDK), a
# virtualenv with the OAuth authorization server's packages, the
# official Anthropic and Google Gen AI SDKs (they check the scripted model's
# wire formats), kubectl (the manifest
# tests render deploy/kubernetes with `kubectl kustomize`), bubblewrap (it
# isolates runners) and Helm's library (they lint and render deploy/helm with it). Installs missing pieces from
# Debian's packages, crates.io, the npm registry and PyPI when run as root.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

TOOLS_ROOT="${TOOLSERVER_TOOLS_ROOT:-$HOME/.cache/toolserver}"
S3S_FS_VERSION="0.14.1"

as_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "test-services: need root to install $1; install it by hand" >&2
    exit 1
  fi
}

apt_install() {
  as_root "$*"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

ensure_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    ensure_pg_stat_statements
    return
  fi
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    apt_install postgresql
  fi
  local version
  version=$(ls /etc/postgresql | sort -n | tail -n 1)
  if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$version main$"; then
    as_root "a PostgreSQL cluster"
    pg_createcluster "$version" main
  fi
  # Local trust auth over TCP, as the tests connect without a password.
  local hba="/etc/postgresql/$version/main/pg_hba.conf"
  if [ -w "$hba" ] && ! grep -q "toolserver-tests" "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust # toolserver-tests' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_postgres
  ensure_pg_stat_statements
}

wait_postgres() {
  for _ in $(seq 1 60); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return
    sleep 0.5
  done
  echo "test-services: PostgreSQL did not come up on 127.0.0.1:5432" >&2
  exit 1
}

# pg_stat_statements preloaded (the turns bench counts the statements of a
# turn with it): added to shared_preload_libraries with ALTER SYSTEM, and the
# cluster on port 5432 restarted, only when it is not loaded already.
ensure_pg_stat_statements() {
  local psql=(psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -tAq -v ON_ERROR_STOP=1)
  local loaded
  loaded=$("${psql[@]}" -c "SHOW shared_preload_libraries")
  case ",${loaded// /}," in
    *,pg_stat_statements,*) return ;;
  esac
  local wanted="pg_stat_statements"
  [ -n "$loaded" ] && wanted="$loaded, pg_stat_statements"
  as_root "a restart of PostgreSQL that loads pg_stat_statements"
  "${psql[@]}" -c "ALTER SYSTEM SET shared_preload_libraries = '$wanted'"
  local version name
  read -r version name < <(pg_lsclusters -h | awk '$3 == 5432 {print $1, $2; exit}')
  echo "test-services: restarting PostgreSQL $version $name to load pg_stat_statements" >&2
  pg_ctlcluster --skip-systemctl-redirect "$version" "$name" restart
  wait_postgres
}

ensure_s3s_fs() {
  local bin="$TOOLS_ROOT/bin/s3s-fs"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$S3S_FS_VERSION"; then
    return
  fi
  echo "test-services: installing s3s-fs $S3S_FS_VERSION into $TOOLS_ROOT" >&2
  cargo install s3s-fs --version "$S3S_FS_VERSION" --features binary --locked --root "$TOOLS_ROOT"
}

ensure_node() {
  if command -v node >/dev/null 2>&1; then
    return
  fi
  apt_install nodejs
}

# NATS with JetStream on 127.0.0.1:4222 (turns requested over NATS).
ensure_nats() {
  if (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
    return
  fi
  command -v nats-server >/dev/null 2>&1 || apt_install nats-server
  echo "test-services: starting nats-server on 127.0.0.1:4222" >&2
  nohup nats-server -js -a 127.0.0.1 -p 4222 -sd "${TMPDIR:-/tmp}/toolserver-nats" >/dev/null 2>&1 &
  for _ in $(seq 50); do
    (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null && return
    sleep 0.1
  done
  echo "test-services: NATS did not come up on 127.0.0.1:4222" >&2
  return 1
}

# `npm ci` in clients/<name> unless the lockfile's packages are installed
# already (every package named after the directory is present, and
# node_modules is newer than the lockfile).
ensure_npm_client() {
  local dir="$REPO_ROOT/clients/$1"
  shift
  command -v npm >/dev/null 2>&1 || apt_install npm
  local installed=yes package
  for package in "$@"; do
    [ -d "$dir/node_modules/$package" ] || installed=no
  done
  if [ "$installed" = yes ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    return
  fi
  (cd "$dir" && npm ci --no-audit --no-fund)
}

# The AI SDK client test's packages (both pinned majors) and the OpenAI
# provider the turns bench's AI SDK peer server uses, from the lockfile.
ensure_ai_sdk() {
  ensure_npm_client ai-sdk ai-v6 ai-v7 @ai-sdk/openai
}

# The browser test's packages (useChat, React, esbuild, playwright-core),
# from the lockfile, and Debian's Chromium for playwright-core to drive.
ensure_browser() {
  command -v chromium >/dev/null 2>&1 || apt_install chromium
  ensure_npm_client browser playwright-core
}

# The tool authors' CLI (clients/cli: esbuild, and the npm package its
# test fixture imports), from the lockfile.
ensure_cli() {
  ensure_npm_client cli esbuild is-number
}

# The official MCP TypeScript SDK client that drives /mcp in the tests.
ensure_mcp_client() {
  ensure_npm_client mcp @modelcontextprotocol/sdk
}

# The official Anthropic and Google Gen AI SDKs that check the scripted model.
ensure_provider_sdks() {
  ensure_npm_client providers @anthropic-ai/sdk @google/genai
}

# A virtualenv at $1 with the pinned packages of requirements file $2; made
# again when the requirements change.
ensure_python_env() {
  local env="$1" requirements="$2"
  if [ -x "$env/bin/python" ] && cmp -s "$requirements" "$env/requirements.txt"; then
    return
  fi
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    apt_install python3-venv
  fi
  rm -rf "$env"
  python3 -m venv "$env"
  "$env/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$env/requirements.txt"
}

# The official MCP Python SDK client that drives /mcp in the tests, pinned
# (clients/mcp-python/requirements.txt).
ensure_mcp_python_client() {
  ensure_python_env "$TOOLS_ROOT/mcp-python" "$REPO_ROOT/clients/mcp-python/requirements.txt"
}

# The OAuth 2.1 authorization server the per-user connection tests run
# against (clients/oauth-server: Authlib and Flask, pinned).
ensure_oauth_server() {
  ensure_python_env "$TOOLS_ROOT/oauth-server" "$REPO_ROOT/clients/oauth-server/requirements.txt"
}

# Bubblewrap isolates runners: the servers the tests start with a JWT secret
# refuse to start without it.
ensure_bubblewrap() {
  bash "$REPO_ROOT/scripts/ensure-bubblewrap.sh"
  if ! command -v bwrap >/dev/null 2>&1; then
    echo "test-services: the tests need bubblewrap; install it by hand" >&2
    exit 1
  fi
}

# The API fuzzer (make fuzz-api, and its CI-sized run in make test), pinned, from PyPI.
SCHEMATHESIS_VERSION="4.32.5"
ensure_schemathesis() {
  if python3 -c "import schemathesis, sys; sys.exit(schemathesis.__version__ != '$SCHEMATHESIS_VERSION')" 2>/dev/null \
     && command -v st >/dev/null 2>&1; then
    return
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip python3-venv
  fi
  python3 -m pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION" \
    || python3 -m pip install --quiet --break-system-packages "schemathesis==$SCHEMATHESIS_VERSION"
}

# Helm's own Go library, shipped in a wheel on PyPI (Debian has no helm):
# the manifest tests lint and render deploy/helm/toolserver with it.
HELM_SDK_VERSION="0.2.2"
ensure_helm_sdk() {
  if python3 -c "import helm_python, sys; sys.exit(helm_python.__version__ != '$HELM_SDK_VERSION')" 2>/dev/null; then
    return
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip python3-venv
  fi
  python3 -m pip install --quiet --disable-pip-version-check "helm-python-sdk==$HELM_SDK_VERSION" \
    || python3 -m pip install --quiet --break-system-packages "helm-python-sdk==$HELM_SDK_VERSION"
}

# kubectl is not in Debian's archive, so it cannot be installed from here.
ensure_kubectl() {
  if command -v kubectl >/dev/null 2>&1; then
    return
  fi
  cat >&2 <<'MSG'
test-services: kubectl is missing: the manifest tests render deploy/kubernetes
test-services: with `kubectl kustomize`. Debian does not package kubectl; install
test-services: it from the Kubernetes project's packages or release binaries
test-services: (https://kubernetes.io/docs/tasks/tools/) and run `make test` again.
MSG
  exit 1
}

ensure_postgres
ensure_kubectl
ensure_s3s_fs
ensure_node
ensure_nats
ensure_ai_sdk
ensure_browser
ensure_cli
ensure_mcp_client
ensure_provider_sdks
ensure_mcp_python_client
ensure_oauth_server
ensure_bubblewrap
ensure_schemathesis
ensure_helm_sdk
echo "test-services: postgres, kubectl, s3s-fs, node, NATS, the AI SDK, the browser test, the CLI, the MCP clients, the provider SDKs, the OAuth server, bubblewrap, schemathesis and the Helm library are ready"
