// The resident worker's HTTP protocol: invoke frames, errors, deadlines,
// cancellation, output limits, console capture, concurrency, /health and
// stale sockets, and the stdin lifeline.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  deferred,
  health,
  invoke,
  invokeRequest,
  makeBundle,
  openInvoke,
  sendJson,
  startHub,
  startTestWorker,
  startWorker,
  tempDir,
} from './helpers.mjs';

const TEST = { timeout: 10_000 };

const echoTool = makeBundle(`
export default {
  async execute(ctx, input) {
    return {
      input,
      config: ctx.config,
      callId: ctx.callId,
      idempotencyKey: ctx.idempotencyKey,
      signal: ctx.signal instanceof AbortSignal && !ctx.signal.aborted,
      asyncTool: 'asyncTool' in ctx ? ctx.asyncTool : 'absent',
      traceparent: 'traceparent' in ctx ? ctx.traceparent : 'absent',
    };
  },
};
`);

// Awaits input.gate (a hub URL) so the test controls when the tool proceeds.
const gatedTool = makeBundle(`
export default {
  async execute(ctx, input) {
    await (await fetch(input.gate)).text();
    return input.n * 2;
  },
};
`);

// Logs "started", reports the abort reason to input.notify, and never finishes.
const hangingTool = makeBundle(`
export default {
  async execute(ctx, input) {
    ctx.signal.addEventListener('abort', () => {
      fetch(input.notify + '?reason=' + ctx.signal.reason.name).catch(() => {});
      ctx.log('after abort');
    });
    ctx.log('started');
    await new Promise(() => {});
  },
};
`);

/** Registers a gate on the hub that holds requests until `open()` is called. */
function gate(hub, path = '/gate') {
  const { promise, resolve } = deferred();
  hub.handle(path, async (req, res) => {
    await promise;
    res.end('open');
  });
  return { url: hub.url + path, open: resolve };
}

test('plain return produces a single final frame with the ctx wired up', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const request = invokeRequest(echoTool, { input: { a: [1, 2] }, config: { region: 'eu' } });
  assert.deepEqual(await invoke(socket, request), [
    {
      t: 'final',
      value: {
        input: { a: [1, 2] },
        config: { region: 'eu' },
        callId: request.callId,
        idempotencyKey: request.idempotencyKey,
        signal: true,
        asyncTool: 'absent',
        traceparent: 'absent',
      },
    },
  ]);

  const asyncTool = { jobId: 'j-1', callbackUrl: 'http://example.invalid/cb' };
  const [frame] = await invoke(socket, invokeRequest(echoTool, { async: asyncTool }));
  assert.deepEqual(frame.value.asyncTool, asyncTool);

  const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const [traced] = await invoke(socket, { ...invokeRequest(echoTool), traceparent });
  assert.equal(traced.value.traceparent, traceparent);
});

test('returning undefined yields a null final value', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const tool = makeBundle('export default { execute() {} };');
  assert.deepEqual(await invoke(socket, invokeRequest(tool)), [{ t: 'final', value: null }]);
});

test('an async generator streams each chunk as it is yielded, then end', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const { url, open } = gate(hub);
  const tool = makeBundle(`
export default {
  async *execute(ctx, input) {
    yield { step: 1 };
    await (await fetch(input.gate)).text();
    yield { step: 2 };
    yield 'done';
  },
};
`);
  const call = await openInvoke(socket, invokeRequest(tool, { input: { gate: url } }));
  assert.equal(call.res.statusCode, 200);
  assert.equal(call.res.headers['content-type'], 'application/x-ndjson');
  // The generator cannot finish until the gate opens, which happens only after this read.
  assert.deepEqual(await call.next(), { t: 'chunk', value: { step: 1 } });
  open();
  assert.deepEqual(await call.rest(), [
    { t: 'chunk', value: { step: 2 } },
    { t: 'chunk', value: 'done' },
    { t: 'end' },
  ]);
});

test('a function returning an async iterable streams too', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const tool = makeBundle(`
export default {
  execute() {
    return { async *[Symbol.asyncIterator]() { yield 1; yield 2; } };
  },
};
`);
  assert.deepEqual(await invoke(socket, invokeRequest(tool)), [
    { t: 'chunk', value: 1 },
    { t: 'chunk', value: 2 },
    { t: 'end' },
  ]);
});

test('a throw becomes an error frame with the error name and message', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const thrower = makeBundle(`
export default {
  async execute(ctx, input) {
    if (input.kind === 'type') null.boom;
    throw new RangeError('out of range: ' + input.kind);
  },
};
`);
  assert.deepEqual(await invoke(socket, invokeRequest(thrower, { input: { kind: 'range' } })), [
    { t: 'error', name: 'RangeError', message: 'out of range: range' },
  ]);
  const [frame] = await invoke(socket, invokeRequest(thrower, { input: { kind: 'type' } }));
  assert.equal(frame.t, 'error');
  assert.equal(frame.name, 'TypeError');

  const midStream = makeBundle(`
export default {
  async *execute() {
    yield 1;
    throw new Error('broke mid-stream');
  },
};
`);
  assert.deepEqual(await invoke(socket, invokeRequest(midStream)), [
    { t: 'chunk', value: 1 },
    { t: 'error', name: 'Error', message: 'broke mid-stream' },
  ]);
});

test('a bundle without an execute function or with a syntax error is a BundleLoadError', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  for (const source of ['export default { run() {} };', 'export default {', 'export const execute = () => 1;']) {
    const [frame, ...rest] = await invoke(socket, invokeRequest(makeBundle(source)));
    assert.equal(frame.name, 'BundleLoadError', source);
    assert.deepEqual(rest, []);
  }
});

test('the deadline ends a hanging call with DeadlineExceeded and fires ctx.signal', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const aborted = hub.hits('/aborted');
  const request = invokeRequest(hangingTool, { input: { notify: `${hub.url}/aborted` }, deadlineMs: 300 });
  const frames = await invoke(socket, request);
  assert.deepEqual(frames, [
    { t: 'log', level: 'info', message: 'started' },
    { t: 'error', name: 'DeadlineExceeded', message: 'deadline of 300 ms exceeded' },
  ]);
  assert.deepEqual(await aborted, ['/aborted?reason=DeadlineExceeded']);
});

test('/cancel ends the call with Cancelled and fires ctx.signal', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const aborted = hub.hits('/aborted');
  const request = invokeRequest(hangingTool, { input: { notify: `${hub.url}/aborted` } });
  const call = await openInvoke(socket, request);
  assert.deepEqual(await call.next(), { t: 'log', level: 'info', message: 'started' });

  assert.deepEqual((await sendJson(socket, 'POST', '/cancel', { callId: request.callId })).body, { cancelled: true });
  assert.deepEqual(await call.rest(), [{ t: 'error', name: 'Cancelled', message: 'call was cancelled' }]);
  assert.deepEqual(await aborted, ['/aborted?reason=Cancelled']);

  for (const callId of [request.callId, 'unknown']) {
    assert.deepEqual((await sendJson(socket, 'POST', '/cancel', { callId })).body, { cancelled: false });
  }
  assert.equal((await health(socket)).inflight, 0);
});

test('a client disconnect fires the call signal', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const aborted = hub.hits('/aborted');
  const call = await openInvoke(socket, invokeRequest(hangingTool, { input: { notify: `${hub.url}/aborted` } }));
  assert.deepEqual(await call.next(), { t: 'log', level: 'info', message: 'started' });
  call.res.destroy();
  assert.deepEqual(await aborted, ['/aborted?reason=ClientDisconnected']);
  assert.equal((await health(socket)).inflight, 0);
});

test('output beyond maxOutputBytes ends the call with OutputTooLarge; the worker keeps serving', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const endless = makeBundle(`
export default {
  async *execute(ctx) {
    while (!ctx.signal.aborted) yield 'x'.repeat(60);
  },
};
`);
  // Each chunk value serializes to 62 bytes, so the third crosses 150.
  assert.deepEqual(await invoke(socket, invokeRequest(endless, { maxOutputBytes: 150 })), [
    { t: 'chunk', value: 'x'.repeat(60) },
    { t: 'chunk', value: 'x'.repeat(60) },
    { t: 'error', name: 'OutputTooLarge', message: 'output exceeds maxOutputBytes (150)' },
  ]);

  const big = makeBundle("export default { execute: () => 'y'.repeat(2000) };");
  const [frame] = await invoke(socket, invokeRequest(big, { maxOutputBytes: 1000 }));
  assert.equal(frame.name, 'OutputTooLarge');

  const [next] = await invoke(socket, invokeRequest(echoTool, { input: 'next' }));
  assert.equal(next.value.input, 'next');
});

test('TOOLSERVER_MAX_OUTPUT_BYTES sets the default limit', TEST, async (t) => {
  const { socket } = await startTestWorker(t, { env: { TOOLSERVER_MAX_OUTPUT_BYTES: '10' } });
  const tool = makeBundle("export default { execute: () => 'z'.repeat(20) };");
  const [frame] = await invoke(socket, invokeRequest(tool));
  assert.equal(frame.name, 'OutputTooLarge');
  assert.deepEqual(await invoke(socket, invokeRequest(tool, { maxOutputBytes: 100 })), [
    { t: 'final', value: 'z'.repeat(20) },
  ]);
});

test('console output is captured per call, even for concurrent calls', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const { url, open } = gate(hub);
  const tool = makeBundle(`
export default {
  async execute(ctx, input) {
    console.log(input.name, 'before');
    await (await fetch(input.gate)).text();
    console.info(input.name, 'info');
    console.warn(input.name, 'warn');
    console.error(input.name, 'error');
    console.debug(input.name, 'debug');
    ctx.log(input.name, 'ctx', { n: 1 });
    return input.name;
  },
};
`);
  const calls = await Promise.all(
    ['alpha', 'beta'].map((name) => openInvoke(socket, invokeRequest(tool, { input: { name, gate: url } }))),
  );
  // Both calls are running (each logged) before either may continue.
  for (const [i, name] of ['alpha', 'beta'].entries()) {
    assert.deepEqual(await calls[i].next(), { t: 'log', level: 'log', message: `${name} before` });
  }
  open();
  for (const [i, name] of ['alpha', 'beta'].entries()) {
    assert.deepEqual(await calls[i].rest(), [
      { t: 'log', level: 'info', message: `${name} info` },
      { t: 'log', level: 'warn', message: `${name} warn` },
      { t: 'log', level: 'error', message: `${name} error` },
      { t: 'log', level: 'debug', message: `${name} debug` },
      { t: 'log', level: 'info', message: `${name} ctx { n: 1 }` },
      { t: 'final', value: name },
    ]);
  }
});

test('20 concurrent calls each get their own answer', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const { url, open } = gate(hub);
  const results = Array.from({ length: 20 }, (_, n) =>
    invoke(socket, invokeRequest(gatedTool, { input: { n, gate: url } })),
  );
  await hub.hits('/gate', 20);
  assert.equal((await health(socket)).inflight, 20);
  open();
  assert.deepEqual(
    await Promise.all(results),
    Array.from({ length: 20 }, (_, n) => [{ t: 'final', value: n * 2 }]),
  );
});

test('/health reports lifetime counters and in-flight calls', TEST, async (t) => {
  const { socket, banner, child } = await startTestWorker(t);
  assert.deepEqual(banner, { ready: true, pid: child.pid });
  assert.deepEqual(await sendJson(socket, 'GET', '/health').then((r) => [r.status, r.body]), [
    200,
    { ok: true, pid: child.pid, modulesLoaded: 0, downloads: 0, cacheHits: 0, inflight: 0 },
  ]);

  await invoke(socket, invokeRequest(echoTool));
  await invoke(socket, invokeRequest(echoTool));
  const hub = await startHub(t);
  const { url, open } = gate(hub);
  const pending = invoke(socket, invokeRequest(gatedTool, { input: { n: 1, gate: url } }));
  await hub.hits('/gate');
  assert.deepEqual(await health(socket), {
    ok: true,
    pid: child.pid,
    modulesLoaded: 2,
    downloads: 0,
    cacheHits: 1,
    inflight: 1,
  });
  open();
  await pending;
  assert.equal((await health(socket)).inflight, 0);
});

test('malformed invoke requests get 400 JSON errors; unknown routes 404', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const valid = invokeRequest(echoTool);
  const { bundle } = valid;
  const cases = [
    '{not json',
    '[]',
    { ...valid, callId: undefined },
    { ...valid, idempotencyKey: undefined },
    { ...valid, deadlineMs: undefined },
    { ...valid, deadlineMs: 0 },
    { ...valid, deadlineMs: 1.5 },
    { ...valid, maxOutputBytes: -1 },
    { ...valid, bundle: undefined },
    { ...valid, bundle: { inline: bundle.inline } },
    { ...valid, bundle: { ...bundle, sha256: bundle.sha256.toUpperCase() } },
    { ...valid, bundle: { ...bundle, sha256: '../../etc' } },
    { ...valid, bundle: { sha256: bundle.sha256 } },
    { ...valid, bundle: { ...bundle, url: 'http://127.0.0.1:1/b.mjs' } },
    { ...valid, bundle: { sha256: bundle.sha256, url: 'file:///etc/passwd' } },
    { ...valid, traceparent: 'not-a-trace' },
    { ...valid, traceparent: '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01' },
  ];
  for (const body of cases) {
    const response = await sendJson(socket, 'POST', '/invoke', body);
    assert.equal(response.status, 400, JSON.stringify(body));
    assert.equal(response.headers['content-type'], 'application/json');
    assert.equal(typeof response.body.error, 'string');
  }
  for (const body of ['{', 'null', { id: 'x' }]) {
    assert.equal((await sendJson(socket, 'POST', '/cancel', body)).status, 400);
  }
  assert.equal((await sendJson(socket, 'GET', '/invoke')).status, 404);
  assert.equal((await sendJson(socket, 'GET', '/nope')).status, 404);
});

test('a callId already in flight is rejected with 409', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const { url, open } = gate(hub);
  const request = invokeRequest(gatedTool, { input: { n: 2, gate: url } });
  const first = invoke(socket, request);
  await hub.hits('/gate');
  assert.equal((await sendJson(socket, 'POST', '/invoke', request)).status, 409);
  open();
  assert.deepEqual(await first, [{ t: 'final', value: 4 }]);
});

test('a worker replaces the stale socket of a worker that died', TEST, async (t) => {
  const dir = await tempDir(t);
  const socket = join(dir, 'worker.sock');
  const crashed = await startWorker(dir, { socket });
  const exit = once(crashed.child, 'exit');
  crashed.child.kill('SIGKILL');
  await exit;
  assert.equal(lstatSync(socket).isSocket(), true);

  const worker = await startWorker(dir, { socket });
  t.after(() => worker.stop());
  assert.equal((await health(socket)).pid, worker.child.pid);
});

test('with --lifeline-stdin the worker exits once its parent closes stdin', TEST, async (t) => {
  const { child } = await startTestWorker(t, { args: ['--lifeline-stdin'], stdin: 'pipe' });
  const exit = once(child, 'exit');
  // Held open, the lifeline keeps the worker serving.
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(child.exitCode, null);
  // What the kernel does when the parent dies, even SIGKILLed.
  child.stdin.end();
  assert.deepEqual(await exit, [0, null]);
});
