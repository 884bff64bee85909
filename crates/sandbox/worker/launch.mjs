// Starts the resident worker inside a runner that is reached by exec (a
// Kubernetes pod): `node launch.mjs --socket <path> [--timeout-ms N]` makes
// sure a healthy worker listens on <path>, starting one if needed, then prints
// one line `{"ready":true,"started":bool,"pid":N}` and exits 0 (exit 1 and a
// message on stderr if no worker became healthy in time).
// `node launch.mjs --socket <path> --stop` kills the worker (SIGKILL), even a
// hung one, and exits 0 once its socket refuses connections (so nothing can
// still reach the dying process), or after the timeout.
//
// The worker runs detached, so it outlives the exec session that started it.
// `<path>.pid` names it; `<path>.lock` keeps two launchers (two server
// replicas) from starting two workers; `<path>.log` takes its stderr.

import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    socket: { type: 'string' },
    'timeout-ms': { type: 'string', default: '10000' },
    stop: { type: 'boolean', default: false },
  },
});
if (!args.socket) {
  process.stderr.write('usage: node launch.mjs --socket <path> [--timeout-ms N] [--stop]\n');
  process.exit(2);
}
const socket = args.socket;
const timeoutMs = Number(args['timeout-ms']);
const pidFile = `${socket}.pid`;
const lockFile = `${socket}.lock`;
const HEALTH_TIMEOUT_MS = 1000;
const POLL_MS = 25;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The worker's health answer, or null when nothing healthy listens. */
function health() {
  return new Promise((resolve) => {
    const req = request({ socketPath: socket, path: '/health', timeout: HEALTH_TIMEOUT_MS }, (res) => {
      const parts = [];
      res.on('data', (part) => parts.push(part));
      res.on('end', () => {
        try {
          const body = JSON.parse(Buffer.concat(parts).toString('utf8'));
          resolve(res.statusCode === 200 && body.ok ? body : null);
        } catch {
          resolve(null);
        }
      });
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
    req.end();
  });
}

/** Whether something still accepts connections on the socket. */
function accepts() {
  return new Promise((resolve) => {
    const probe = connect(socket);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
}

/** Waits until the socket refuses connections, or the deadline. */
async function gone(deadline) {
  while (Date.now() < deadline && (await accepts())) await sleep(POLL_MS);
}

function killRecorded() {
  let pid;
  try {
    pid = Number(readFileSync(pidFile, 'utf8'));
  } catch {
    return;
  }
  try {
    if (pid > 0) process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
  rmSync(pidFile, { force: true });
}

/** Takes the launch lock; a lock older than the timeout is a dead launcher's. */
async function lock(deadline) {
  while (Date.now() < deadline) {
    try {
      closeSync(openSync(lockFile, 'wx'));
      return true;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    try {
      if (Date.now() - statSync(lockFile).mtimeMs > timeoutMs) rmSync(lockFile, { force: true });
    } catch {
      // Released meanwhile.
    }
    if (await health()) return false;
    await sleep(POLL_MS);
  }
  return false;
}

function startWorker() {
  const log = openSync(`${socket}.log`, 'a');
  const worker = fileURLToPath(new URL('./worker.mjs', import.meta.url));
  const child = spawn(process.execPath, [worker, '--socket', socket], {
    detached: true,
    stdio: ['ignore', 'ignore', log],
  });
  closeSync(log);
  writeFileSync(pidFile, String(child.pid));
  child.unref();
}

async function launch() {
  const deadline = Date.now() + timeoutMs;
  let found = await health();
  if (found) return { started: false, pid: found.pid };
  if (!(await lock(deadline))) {
    found = await health();
    if (found) return { started: false, pid: found.pid };
    throw new Error(`no healthy worker on ${socket} within ${timeoutMs} ms (launch lock busy)`);
  }
  try {
    found = await health();
    if (found) return { started: false, pid: found.pid };
    killRecorded();
    startWorker();
    while (Date.now() < deadline) {
      found = await health();
      if (found) return { started: true, pid: found.pid };
      await sleep(POLL_MS);
    }
    killRecorded();
    throw new Error(`the worker did not become healthy within ${timeoutMs} ms; see ${socket}.log`);
  } finally {
    rmSync(lockFile, { force: true });
  }
}

if (args.stop) {
  killRecorded();
  await gone(Date.now() + timeoutMs);
  rmSync(socket, { force: true });
  process.exit(0);
}
try {
  const { started, pid } = await launch();
  process.stdout.write(`${JSON.stringify({ ready: true, started, pid })}\n`, () => process.exit(0));
} catch (err) {
  process.stderr.write(`launch: ${err.message}\n`);
  process.exit(1);
}
