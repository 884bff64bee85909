#!/usr/bin/env bash
# Fuzzes the HTTP API with schemathesis against a real server: the server
# binary on a scratch database, its own data directory, local runners, and a
# scripted model on loopback for agent turns. Every check runs, with the
# stateful phase following the links of openapi.yaml. Exits non-zero on any
# failure.
#
#   scripts/fuzz-api.sh <server binary> [max examples per operation] [max seconds]
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:?usage: fuzz-api.sh <server binary> [max examples] [max seconds]}"
MAX_EXAMPLES="${2:-100}"
MAX_SECONDS="${3:-}"
ADMIN_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
SECRET="fuzz-secret-$$-$RANDOM"
DB="toolserver_fuzz_$$"
WORK="$(mktemp -d)"
chmod 755 "$WORK"
REPORTS="${FUZZ_REPORT_DIR:-$REPO_ROOT/target/fuzz-api/$(date -u +%Y%m%dT%H%M%SZ)-$$}"
mkdir -p "$REPORTS"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

SERVER_PID=""
MODEL_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  [ -n "$MODEL_PID" ] && kill "$MODEL_PID" 2>/dev/null
  psql -q "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

psql -q "$ADMIN_URL" -c "CREATE DATABASE $DB" >/dev/null
DB_URL="${ADMIN_URL%/*}/$DB"

MODEL_PORT="$(free_port)"
python3 "$REPO_ROOT/scripts/fuzz/scripted_model.py" "$MODEL_PORT" &
MODEL_PID=$!

PORT="$(free_port)"
BASE="http://127.0.0.1:$PORT"
# The server takes only the settings below: a TOOLSERVER_* variable of this
# shell would change them, or stop it (it refuses variables it does not know).
for name in $(compgen -e | grep '^TOOLSERVER_' || true); do
  unset "$name"
done
# One account sends every request, thousands a minute: its rates are raised
# so that admission (tested on its own) does not refuse schema-valid requests.
DATABASE_URL="$DB_URL" \
TOOLSERVER_BIND="127.0.0.1:$PORT" \
TOOLSERVER_METRICS_BIND="127.0.0.1:0" \
TOOLSERVER_PUBLIC_URL="$BASE" \
TOOLSERVER_DATA_DIR="$WORK/data" \
TOOLSERVER_JWT_SECRET="$SECRET" \
TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE=1000000 \
TOOLSERVER_ACCOUNT_CALL_BURST=1000000 \
TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE=1000000 \
TOOLSERVER_ACCOUNT_TURN_BURST=1000000 \
TOOLSERVER_OPENAI_BASE_URL="http://127.0.0.1:$MODEL_PORT/v1" \
TOOLSERVER_OPENAI_API_KEY="fuzz" \
TOOLSERVER_OUTBOUND_ALLOW_PRIVATE=true \
TOOLSERVER_TAVILY_API_KEY="fuzz" \
RUST_LOG="${FUZZ_RUST_LOG:-warn,toolserver_api::layers=info}" \
  "$BIN" serve >"$REPORTS/server.log" 2>&1 &
SERVER_PID=$!

for _ in $(seq 1 200); do
  curl -fsS "$BASE/readyz" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$REPORTS/server.log"; exit 1; }
  sleep 0.1
done

TOKEN="$("$BIN" token --account fuzz-account --ttl-secs 86400 --jwt-secret "$SECRET")"

# Two runs on one server: the example, coverage and fuzzing phases, then
# the stateful phase with its own share of the time (a third), so that
# fuzzing cannot spend the whole budget before links are followed.
SEED="${FUZZ_SEED:-$RANDOM}"
run_phases() {
  local phases="$1" seconds="$2"
  local args=(run "$REPO_ROOT/openapi.yaml"
    --url "$BASE"
    --header "Authorization: Bearer $TOKEN"
    --checks all
    --phases "$phases"
    --max-examples "$MAX_EXAMPLES"
    --workers 2
    --report junit,ndjson --report-dir "$REPORTS"
    --seed "$SEED")
  if [ -n "$seconds" ]; then
    args+=(--max-time "$seconds")
  fi
  (cd "$REPO_ROOT/scripts/fuzz" && PYTHONPATH=. st --config-file schemathesis.toml "${args[@]}")
}

# Runs `run_phases "$@"`, and once more when schemathesis itself broke
# (a "Runtime Error" inside its generator, such as an IndexError in
# Hypothesis's optimiser) without any failed check: that says nothing of
# the server. A failed check is never run again.
run_phases_through_tool_errors() {
  local log="$REPORTS/phases-$1.log" rc
  run_phases "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ] && grep -q 'Runtime Error' "$log" && ! grep -q 'FAILURES' "$log"; then
    echo "fuzz-api: schemathesis itself failed (a Runtime Error, no failed check); running $1 once more" >&2
    run_phases "$@"
    rc=$?
  fi
  return "$rc"
}

status=0
if [ -n "$MAX_SECONDS" ]; then
  run_phases_through_tool_errors examples,coverage,fuzzing "$((MAX_SECONDS * 2 / 3))" || status=$?
  run_phases_through_tool_errors stateful "$((MAX_SECONDS / 3))" || status=$?
else
  run_phases_through_tool_errors examples,coverage,fuzzing "" || status=$?
  run_phases_through_tool_errors stateful "" || status=$?
fi

answered=$(grep -c 'request finished\|request failed' "$REPORTS/server.log" || true)
failed=$(grep -c 'request failed' "$REPORTS/server.log" || true)
echo "fuzz-api: the server answered $answered requests; $failed with a 5xx"
if [ "$failed" -ne 0 ] || grep -q 'panicked' "$REPORTS/server.log"; then
  echo "fuzz-api: the server logged failures:" >&2
  grep -E 'panicked|request failed' "$REPORTS/server.log" | head -20 >&2
  status=1
fi
exit "$status"
