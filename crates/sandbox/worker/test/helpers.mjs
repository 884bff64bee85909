// Test helpers: bundles, worker and oneshot child processes, an HTTP client
// for unix sockets, and a local HTTP "hub" that serves bundles and gates.

import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { text } from 'node:stream/consumers';
import { fileURLToPath } from 'node:url';

const WORKER_DIR = fileURLToPath(new URL('..', import.meta.url));
const STARTUP_DEADLINE_MS = 5000;

const sha256Hex = (bytes) => createHash('sha256').update(bytes).digest('hex');

/** A bundle from module source: its bytes, hash and inline (base64) form. */
export function makeBundle(source) {
  const bytes = Buffer.from(source);
  return { bytes, sha256: sha256Hex(bytes), inline: bytes.toString('base64') };
}

/** An invoke request for an inline bundle; `overrides` replace top-level fields. */
export function invokeRequest(bundle, overrides = {}) {
  return {
    callId: randomUUID(),
    idempotencyKey: randomUUID(),
    input: null,
    config: {},
    bundle: { sha256: bundle.sha256, inline: bundle.inline },
    deadlineMs: 5000,
    ...overrides,
  };
}

/** A temporary directory, removed after test `t`. */
export async function tempDir(t) {
  const dir = await mkdtemp(join(tmpdir(), 'toolserver-worker-test-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Spawns `worker.mjs` on a socket in `dir`, resolving once it reports ready;
 * `args` are extra arguments, `stdin` the child's stdin ('ignore' or 'pipe').
 */
export async function startWorker(
  dir,
  {
    cacheRoots = join(dir, 'cache'),
    env = {},
    socket = join(dir, `worker-${randomUUID().slice(0, 8)}.sock`),
    args = [],
    stdin = 'ignore',
  } = {},
) {
  const child = spawn(process.execPath, [join(WORKER_DIR, 'worker.mjs'), '--socket', socket, ...args], {
    env: { ...process.env, TOOLSERVER_CACHE_ROOTS: cacheRoots, ...env },
    stdio: [stdin, 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (data) => {
    stderr += data;
  });
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`worker exited with ${code} before becoming ready: ${stderr}`);
  });
  exited.catch(() => {});
  const ready = once(createInterface({ input: child.stdout }), 'line').then(([line]) => JSON.parse(line));
  const timeout = new Promise((_, reject) => {
    setTimeout(() => reject(new Error('worker did not become ready in time')), STARTUP_DEADLINE_MS).unref();
  });
  let banner;
  try {
    banner = await Promise.race([ready, exited, timeout]);
  } catch (err) {
    child.kill();
    throw err;
  }
  return {
    socket,
    banner,
    child,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exit = once(child, 'exit');
      child.kill('SIGTERM');
      await exit;
    },
  };
}

/** Starts a worker with its own temporary directory, stopped after test `t`. */
export async function startTestWorker(t, options) {
  const dir = await tempDir(t);
  const worker = await startWorker(dir, options);
  t.after(() => worker.stop());
  return { ...worker, dir };
}

/** Sends one request over the unix socket; resolves with the response once headers arrive. */
function send(socket, method, path, body) {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ socketPath: socket, method, path, agent: false }, resolve);
    req.on('error', reject);
    req.end(body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body));
  });
}

/** Sends a request and parses the whole JSON response body. */
export async function sendJson(socket, method, path, body) {
  const res = await send(socket, method, path, body);
  return { status: res.statusCode, headers: res.headers, body: JSON.parse(await text(res)) };
}

/** Parses an NDJSON stream into frames, one per line as it arrives. */
async function* frames(stream) {
  for await (const line of createInterface({ input: stream, crlfDelay: Infinity })) yield JSON.parse(line);
}

/** Starts an invoke; `next()` reads one frame, `rest()` reads the remaining frames. */
export async function openInvoke(socket, body) {
  const res = await send(socket, 'POST', '/invoke', body);
  const iterator = frames(res);
  return {
    res,
    async next() {
      const { value, done } = await iterator.next();
      if (done) throw new Error('stream ended');
      return value;
    },
    async rest() {
      const all = [];
      for (let step = await iterator.next(); !step.done; step = await iterator.next()) all.push(step.value);
      return all;
    },
  };
}

/** Runs an invoke to completion and returns all frames. */
export async function invoke(socket, body) {
  const call = await openInvoke(socket, body);
  return call.rest();
}

export const health = async (socket) => (await sendJson(socket, 'GET', '/health')).body;

/** Runs `oneshot.mjs` with `stdin` as its input; resolves with exit code and parsed frames. */
export async function runOneshot(stdin, cacheRoots, env = {}) {
  const child = spawn(process.execPath, [join(WORKER_DIR, 'oneshot.mjs')], {
    env: { ...process.env, TOOLSERVER_CACHE_ROOTS: cacheRoots, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  child.stdin.end(typeof stdin === 'string' ? stdin : JSON.stringify(stdin));
  const [stdout, stderr, [code]] = await Promise.all([text(child.stdout), text(child.stderr), once(child, 'exit')]);
  const lines = stdout.split('\n').filter(Boolean);
  return { code, stderr, frames: lines.map((line) => JSON.parse(line)) };
}

/** A promise with its resolve function exposed. */
export function deferred() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/**
 * A local HTTP server on 127.0.0.1. `handle(path, fn)` registers a handler;
 * every request is recorded, and `hits(path, n)` resolves with the URLs of the
 * first `n` requests to `path` once they have arrived.
 */
export async function startHub(t) {
  const handlers = new Map();
  const seen = new Map(); // path -> request URLs
  const waiters = new Set();
  const server = createServer(async (req, res) => {
    const { pathname } = new URL(req.url, 'http://hub');
    seen.set(pathname, [...(seen.get(pathname) ?? []), req.url]);
    for (const waiter of waiters) waiter();
    const handler = handlers.get(pathname);
    if (handler) await handler(req, res);
    else res.writeHead(404).end('not found');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    handle(path, handler) {
      handlers.set(path, handler);
    },
    count: (path) => seen.get(path)?.length ?? 0,
    hits(path, n = 1) {
      return new Promise((resolve) => {
        const check = () => {
          const urls = seen.get(path) ?? [];
          if (urls.length < n) return;
          waiters.delete(check);
          resolve(urls.slice(0, n));
        };
        waiters.add(check);
        check();
      });
    },
  };
}
