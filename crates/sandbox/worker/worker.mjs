// Resident worker: `node worker.mjs --socket <path>` serves HTTP/1.1 on a unix
// socket and runs tool calls, streaming their frames as NDJSON.
//
//   POST /invoke  invoke request -> 200 NDJSON frames (400 bad body, 409 callId in flight)
//   POST /cancel  {"callId"}     -> {"cancelled":bool}
//   GET  /health                 -> {"ok":true,"pid",...counters,"inflight"}

import { lstatSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { BundleCache, Call, RequestError, captureConsole, parseInvokeRequest, resolveCacheRoot } from './runtime.mjs';

// Inline bundles travel in the request body.
const MAX_BODY_BYTES = 64 * 1024 * 1024;

const { values: args } = parseArgs({ options: { socket: { type: 'string' } } });
if (!args.socket) {
  process.stderr.write('usage: node worker.mjs --socket <path>\n');
  process.exit(2);
}

captureConsole();
const cache = new BundleCache(resolveCacheRoot());
const inflight = new Map(); // callId -> Call

function sendJson(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function readBody(req) {
  const parts = [];
  let size = 0;
  for await (const part of req) {
    size += part.length;
    if (size > MAX_BODY_BYTES) throw new RequestError(`request body exceeds ${MAX_BODY_BYTES} bytes`, 413);
    parts.push(part);
  }
  return Buffer.concat(parts).toString('utf8');
}

async function invoke(req, res) {
  const receivedAt = performance.now();
  const request = parseInvokeRequest(await readBody(req));
  if (inflight.has(request.callId)) throw new RequestError(`call ${request.callId} is already in flight`, 409);

  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  res.flushHeaders();
  const call = new Call(request, { write: (line) => res.write(line), receivedAt });
  inflight.set(request.callId, call);
  // 'close' also fires after a normal end, when abort() is a no-op.
  res.on('close', () => call.abort());
  await call.start(cache);
  inflight.delete(request.callId);
  res.end();
}

async function cancel(req, res) {
  const text = await readBody(req);
  let body;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw new RequestError(`invalid JSON: ${err.message}`);
  }
  if (typeof body?.callId !== 'string') throw new RequestError('callId must be a string');
  sendJson(res, 200, { cancelled: inflight.get(body.callId)?.cancel() ?? false });
}

function health(res) {
  sendJson(res, 200, { ok: true, pid: process.pid, ...cache.stats, inflight: inflight.size });
}

const server = createServer(async (req, res) => {
  const route = `${req.method} ${new URL(req.url, 'http://worker').pathname}`;
  try {
    if (route === 'POST /invoke') await invoke(req, res);
    else if (route === 'POST /cancel') await cancel(req, res);
    else if (route === 'GET /health') health(res);
    else sendJson(res, 404, { error: `no route for ${route}` });
  } catch (err) {
    if (err instanceof RequestError) sendJson(res, err.status, { error: err.message });
    else sendJson(res, 500, { error: err.message });
  }
});

// Remove a socket left behind by a previous worker, but never any other kind of file.
try {
  if (lstatSync(args.socket).isSocket()) rmSync(args.socket);
} catch (err) {
  if (err.code !== 'ENOENT') throw err;
}

server.listen(args.socket, () => {
  process.stdout.write(`${JSON.stringify({ ready: true, pid: process.pid })}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, () => {
    server.close();
    rmSync(args.socket, { force: true });
    process.exit(0);
  });
}
