// Resident worker: `node worker.mjs --socket <path> [--lifeline-stdin]` serves
// HTTP/1.1 on a unix socket and runs tool calls, streaming their frames as
// NDJSON. With --lifeline-stdin, stdin is a pipe the parent (the server) holds
// for as long as it lives: its end means the parent is gone, even SIGKILLed,
// and the worker exits too.
//
//   POST /invoke  invoke request -> 200 NDJSON frames (400 bad body, 409 callId in flight);
//                 with async.completeUrl: one {"t":"launched"} frame, then the call runs
//                 in the background (pinging async.heartbeatUrl every async.livenessIntervalMs;
//                 the tool may post progress with ctx.asyncTool.heartbeat) and its outcome
//                 is posted to completeUrl (callbacks.mjs); with async.inlineMs too, a call
//                 that ends within that many ms answers in the response instead (its
//                 chunks, then its terminal frame; nothing is posted), and one that does
//                 not gets its chunks so far, then {"t":"launched"}, and goes on as above
//   POST /cancel  {"callId"}     -> {"cancelled":bool}
//   GET  /logs?callId=<id>       -> {"logs":[...]} of a background call
//   GET  /health                 -> {"ok":true,"pid",...counters,"inflight"}; inflight counts
//                                   background calls until their outcome is delivered
//
// Its stdout tells its parent: one {"ready":true,"pid"} line once it listens, then
// {"done":"<callId>"} as each background call is over (its outcome delivered, or
// given up), so a parent that sees the worker exit knows which calls went with it.
//
// In a Kubernetes runner pod the same API is also served on the pod network,
// behind the runner's bearer secret (channel.mjs).

import { grantEgress } from './egress.mjs';
import { lstatSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { channelSettings, listenChannel } from './channel.mjs';
import { deliverCompletion, heartbeater, keepAlive } from './callbacks.mjs';
import { BundleCache, Call, RequestError, captureConsole, parseInvokeRequest, resolveCacheRoot } from './runtime.mjs';

// Inline bundles travel in the request body.
const MAX_BODY_BYTES = 64 * 1024 * 1024;

const { values: args } = parseArgs({
  options: { socket: { type: 'string' }, 'lifeline-stdin': { type: 'boolean', default: false } },
});
if (!args.socket) {
  process.stderr.write('usage: node worker.mjs --socket <path> [--lifeline-stdin]\n');
  process.exit(2);
}

const channel = channelSettings();
captureConsole();
const cache = new BundleCache(resolveCacheRoot());
const inflight = new Map(); // callId -> Call (a background one until its outcome is delivered)
const backgroundLogs = new Map(); // callId -> log frames of a background call (bounded)
const MAX_BACKGROUND_LOGS = 1000; // calls whose logs are kept
const MAX_LOG_LINES = 200; // lines kept per call
const LAUNCHED = '{"t":"launched"}\n';

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
  grantEgress(request.egressToken);

  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  if (request.async?.completeUrl !== undefined) {
    launch(request, receivedAt, res);
    return;
  }
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

// A detached call: runs without a client, keeps its logs, proves the runner
// alive while it runs, and posts its outcome to async.completeUrl with the
// call's job token. With async.inlineMs the launch's response stays open that
// long: a call that ends by then answers in it and posts nothing; otherwise
// the response ends with `launched` and the same call goes on in the
// background. A launch whose response closes before either (the server gave
// up on it) aborts the call, which then posts that it failed.
function launch(request, receivedAt, res) {
  const logs = [];
  let terminal = null;
  let last = null;
  // The launch's response, while the call may still answer in it.
  let answer = request.async.inlineMs === undefined ? null : res;
  const write = (line) => {
    const frame = JSON.parse(line);
    if (frame.t === 'log') {
      if (logs.push({ level: frame.level, message: frame.message }) > MAX_LOG_LINES) logs.shift();
    } else if (frame.t === 'chunk') {
      last = frame.value;
    } else {
      terminal = frame.t === 'end' ? { t: 'final', value: last } : frame;
    }
    answer?.write(line);
  };
  const asyncTool = request.async.heartbeatUrl === undefined ? {} : { heartbeat: heartbeater(request.async) };
  // A call that may answer inline streams its chunks; a background one only needs its last value.
  const call = new Call(request, { write, drain: answer === null, receivedAt, asyncTool });
  inflight.set(request.callId, call);
  backgroundLogs.set(request.callId, logs);
  if (backgroundLogs.size > MAX_BACKGROUND_LOGS) backgroundLogs.delete(backgroundLogs.keys().next().value);
  // Pings go on while the outcome is being delivered: the call is not over for the server yet.
  const stopPinging = keepAlive(request.async);
  const release = () => {
    const open = answer;
    answer = null;
    return open;
  };
  let window = null;
  if (answer === null) {
    res.end(LAUNCHED);
  } else {
    res.flushHeaders();
    window = setTimeout(() => release()?.end(LAUNCHED), request.async.inlineMs);
    res.on('close', () => {
      if (release() !== null) call.abort();
    });
  }
  call.start(cache).then(async () => {
    clearTimeout(window);
    const open = release();
    if (open !== null) open.end();
    else await deliverCompletion(request.async, completionOf(terminal));
    stopPinging();
    inflight.delete(request.callId);
    process.stdout.write(`${JSON.stringify({ done: request.callId })}\n`);
  });
}

function completionOf(frame) {
  if (frame?.t === 'final') return { status: 'completed', response: frame.value ?? null };
  if (frame?.t === 'error') return { status: 'failed', error: `${frame.name}: ${frame.message}` };
  return { status: 'failed', error: 'the call ended without a result' };
}

function logs(req, res) {
  const callId = new URL(req.url, 'http://worker').searchParams.get('callId');
  const kept = backgroundLogs.get(callId);
  if (kept === undefined) sendJson(res, 404, { error: `no background call ${callId}` });
  else sendJson(res, 200, { logs: kept });
}

function health(res) {
  sendJson(res, 200, { ok: true, pid: process.pid, ...cache.stats, inflight: inflight.size });
}

async function route(req, res) {
  const route = `${req.method} ${new URL(req.url, 'http://worker').pathname}`;
  try {
    if (route === 'POST /invoke') await invoke(req, res);
    else if (route === 'POST /cancel') await cancel(req, res);
    else if (route === 'GET /health') health(res);
    else if (route === 'GET /logs') logs(req, res);
    else sendJson(res, 404, { error: `no route for ${route}` });
  } catch (err) {
    if (err instanceof RequestError) sendJson(res, err.status, { error: err.message });
    else sendJson(res, 500, { error: err.message });
  }
}

const server = createServer(route);

// Remove a socket left behind by a previous worker, but never any other kind of file.
try {
  if (lstatSync(args.socket).isSocket()) rmSync(args.socket);
} catch (err) {
  if (err.code !== 'ENOENT') throw err;
}

const channelServer = channel && (await listenChannel(channel, route));
server.listen(args.socket, () => {
  process.stdout.write(`${JSON.stringify({ ready: true, pid: process.pid })}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, () => {
    server.close();
    channelServer?.close();
    rmSync(args.socket, { force: true });
    process.exit(0);
  });
}

// The socket stays: a successor may already listen on the same path, and a
// stale socket is removed by the next worker anyway.
if (args['lifeline-stdin']) {
  const parentGone = () => {
    process.stderr.write('worker: the parent process is gone; exiting\n');
    process.exit(0);
  };
  process.stdin.on('end', parentGone).on('error', parentGone).resume();
}
