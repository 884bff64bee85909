# The runner image: Node.js, tini as PID 1, and the worker sources. Runner
# pods run it as uid/gid 10001 with a read-only root filesystem; /cache and
# /tmp are volumes. Build from the repository root:
#   docker build -f deploy/runner.Dockerfile -t toolserver-runner:dev .
FROM node:20-bookworm-slim

# tini reaps the children of the processes the server execs into the pod.
# The package managers bundled with the base image are removed: uploaded
# bundles arrive already bundled and nothing is installed at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && rm -rf /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/corepack /opt/yarn-* \
 && rm -f /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack /usr/local/bin/yarn /usr/local/bin/yarnpkg \
 && groupadd --gid 10001 runner \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin runner

COPY crates/sandbox/worker/*.mjs /opt/toolserver/worker/

ENV HOME=/tmp
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "/opt/toolserver/worker/hold.mjs"]
