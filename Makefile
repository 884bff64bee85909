# toolserver: `make run` starts the server on its embedded defaults;
# `make test` installs what the tests need and runs every check and test.

export CARGO_TARGET_DIR ?= $(HOME)/.cache/toolserver/target
export S3S_FS_BIN ?= $(HOME)/.cache/toolserver/bin/s3s-fs
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
TRIALS ?= 200
# The API fuzzer: examples per operation and a time budget (seconds) for `make fuzz-api`.
FUZZ_EXAMPLES ?= 400
FUZZ_SECONDS ?= 1800

.PHONY: run build test test-deps lint test-rust test-worker test-fuzz fuzz-api bench chaos openapi routes-docs settings-docs docs clean kind-test

## Run the server: private Postgres under .toolserver/, filesystem bundles, dev token,
## runners isolated by bubblewrap (installed here when root and missing).
run:
	bash scripts/ensure-bubblewrap.sh
	cargo run -p toolserver -- serve

build:
	cargo build --release -p toolserver

## Everything CI checks: formatting, lints, Rust tests, worker tests.
test: test-deps lint test-rust test-worker test-fuzz

test-deps:
	bash scripts/test-services.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets --locked -- -D warnings

test-rust:
	DATABASE_URL=$(TEST_DATABASE_URL) cargo test --workspace --locked

test-worker:
	cd crates/sandbox/worker && node --test test/

## A CI-sized run of the API fuzzer against the debug server (a few
## thousand requests, bounded in time); fails on any failed check.
test-fuzz:
	cargo build -p toolserver --locked
	FUZZ_SEED=$${FUZZ_SEED:-1} bash scripts/fuzz-api.sh $(CARGO_TARGET_DIR)/debug/toolserver 15 240

## The API fuzzer at full size against the release server: every check,
## the stateful phase following openapi.yaml's links.
fuzz-api: test-deps
	cargo build --release -p toolserver --locked
	bash scripts/fuzz-api.sh $(CARGO_TARGET_DIR)/release/toolserver $(FUZZ_EXAMPLES) $(FUZZ_SECONDS)

## Invocation latency: API vs worker socket (the floor), runner cold start,
## an HTTP tool vs the same request made straight to its upstream,
## job claims against history, ledger pages against 1,000,000 attempts, turns (with their statements,
## against an AI SDK peer, and on one growing conversation), one account's flood against another's
## calls and turns (noisy neighbour), the Kubernetes exec transport vs local sockets,
## judging one call by 100 policies, and a new tool's first call with the
## local runners' warm pool full and drained.
bench: test-deps
	DATABASE_URL=$(TEST_DATABASE_URL) cargo bench -p toolserver-api --bench invoke
	DATABASE_URL=$(TEST_DATABASE_URL) cargo bench -p toolserver-store --bench claim
	DATABASE_URL=$(TEST_DATABASE_URL) cargo bench -p toolserver-store --bench ledger
	DATABASE_URL=$(TEST_DATABASE_URL) cargo bench -p toolserver --bench turns
	DATABASE_URL=$(TEST_DATABASE_URL) cargo bench -p toolserver --bench noisy
	cargo bench -p toolserver-kubernetes --bench exec
	cargo bench -p toolserver-harness --bench policy
	cargo bench -p toolserver-sandbox --bench warm_pool

## Crash trials of detached turns on the release binary: two servers on one
## scratch database, a random one SIGKILLed and restarted per trial. Prints
## `trials=N lost=L duplicated=D stuck=S leaked=K misordered=M`; fails on any non-zero count.
## TRIALS=1000 for a long run; CHAOS_FLAGS adds options (e.g. --seed 7).
chaos: test-deps
	cargo build --release -p toolserver -p toolserver-chaos
	DATABASE_URL=$(TEST_DATABASE_URL) $(CARGO_TARGET_DIR)/release/toolserver-chaos \
		--binary $(CARGO_TARGET_DIR)/release/toolserver --trials $(TRIALS) $(CHAOS_FLAGS)

## The Kubernetes end-to-end suite on a local kind cluster (needs docker, kind,
## kubectl; skipped with a message when one is missing). KIND_KEEP=1 keeps the cluster.
kind-test:
	bash scripts/kind-test.sh

## Regenerate openapi.yaml from the routes.
openapi:
	cargo run -q -p toolserver -- openapi > openapi.yaml

## Regenerate docs/routes.md (every route, its summary and authentication)
## from the same OpenAPI document.
routes-docs:
	cargo run -q -p toolserver -- routes-docs > docs/routes.md

## Regenerate docs/configuration.md (every setting, its default, what it
## accepts and its help) from the settings' declarations.
settings-docs:
	cargo run -q -p toolserver -- settings-docs > docs/configuration.md

## Regenerate every generated page under docs/.
docs: routes-docs settings-docs

clean:
	rm -rf .toolserver
