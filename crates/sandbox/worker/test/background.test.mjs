// Detached calls: with async.completeUrl the worker answers one `launched`
// frame at once, runs the call in the background, keeps its logs, and posts
// the outcome itself with the call's job token, retrying only answers that
// may succeed later.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { deferred, health, invoke, invokeRequest, makeBundle, openInvoke, sendJson, startHub, startTestWorker } from './helpers.mjs';

const TEST = { timeout: 15_000 };

// Waits for input.gate, logs, then returns (or throws when input.fail).
const gatedTool = makeBundle(`
export default {
  async execute(ctx, input) {
    ctx.log('working on', input.job);
    await (await fetch(input.gate)).text();
    if (input.fail) throw new TypeError('the job broke');
    return { done: input.job, resultId: ctx.asyncTool.resultId };
  },
};
`);

async function until(condition) {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 10));
}

async function bodyOf(req) {
  let text = '';
  for await (const part of req) text += part;
  return JSON.parse(text);
}

function detached(hub, input) {
  return invokeRequest(gatedTool, {
    input: { ...input, gate: `${hub.url}/gate` },
    async: {
      resultId: 'r-1',
      completePath: '/sandbox-jobs/r-1/complete',
      completeUrl: `${hub.url}/complete`,
      completionToken: 'job-token-1',
    },
  });
}

test('a detached call launches at once and posts its result with the job token', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const gate = deferred();
  hub.handle('/gate', async (req, res) => {
    await gate.promise;
    res.end('go');
  });
  const posted = [];
  hub.handle('/complete', async (req, res) => {
    posted.push({ token: req.headers['x-job-token'], body: await bodyOf(req) });
    // The first delivery meets a server that is briefly unavailable.
    res.writeHead(posted.length === 1 ? 503 : 200).end('{}');
  });
  const request = detached(hub, { job: 'j1' });
  assert.deepEqual(await invoke(socket, request), [{ t: 'launched' }]);
  await hub.hits('/gate');
  const { body: during } = await sendJson(socket, 'GET', `/logs?callId=${request.callId}`);
  assert.deepEqual(during.logs, [{ level: 'info', message: 'working on j1' }]);
  gate.resolve();
  await until(() => posted.length === 2);
  const expected = { token: 'job-token-1', body: { status: 'completed', response: { done: 'j1', resultId: 'r-1' } } };
  assert.deepEqual(posted, [expected, expected]);
});

test('a failing detached call posts failed, and a 4xx answer is final', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  hub.handle('/gate', (req, res) => res.end('go'));
  const posted = [];
  hub.handle('/complete', async (req, res) => {
    posted.push(await bodyOf(req));
    res.writeHead(409).end('{}');
  });
  assert.deepEqual(await invoke(socket, detached(hub, { job: 'j2', fail: true })), [{ t: 'launched' }]);
  await until(() => posted.length === 1);
  // A retry would come 200 ms later; none does.
  await new Promise((resolve) => setTimeout(resolve, 600));
  assert.deepEqual(posted, [{ status: 'failed', error: 'TypeError: the job broke' }]);
});

test('a completion URL needs a job token', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const request = invokeRequest(gatedTool, { async: { completeUrl: 'http://127.0.0.1:9/complete' } });
  const { status, body } = await sendJson(socket, 'POST', '/invoke', request);
  assert.equal(status, 400);
  assert.match(body.error, /completionToken/);
});

// Posts three heartbeats and returns what each resolved to.
const heartbeatTool = makeBundle(`
export default {
  async execute(ctx, input) {
    const first = await ctx.asyncTool.heartbeat({ pct: 50 });
    const second = await ctx.asyncTool.heartbeat();
    const third = await ctx.asyncTool.heartbeat('late');
    return { first, second, third, token: 'completionToken' in ctx.asyncTool };
  },
};
`);

function withHeartbeats(hub, tool, input, extra = {}) {
  return invokeRequest(tool, {
    input,
    async: {
      resultId: 'r-2',
      completeUrl: `${hub.url}/complete`,
      completionToken: 'job-token-2',
      heartbeatUrl: `${hub.url}/heartbeat`,
      ...extra,
    },
  });
}

test('ctx.asyncTool.heartbeat posts progress with the job token and reports the answer', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const beats = [];
  hub.handle('/heartbeat', async (req, res) => {
    beats.push({ token: req.headers['x-job-token'], body: await bodyOf(req) });
    // The first beat meets a brief outage and is retried; the last one hears the call is settled.
    const status = beats.length === 1 ? 503 : beats.length === 4 ? 409 : 200;
    res.writeHead(status).end('{}');
  });
  const completions = [];
  hub.handle('/complete', async (req, res) => {
    completions.push(await bodyOf(req));
    res.end('{}');
  });
  assert.deepEqual(await invoke(socket, withHeartbeats(hub, heartbeatTool, null)), [{ t: 'launched' }]);
  await until(() => completions.length === 1);
  const token = 'job-token-2';
  assert.deepEqual(beats, [
    { token, body: { progress: { pct: 50 } } },
    { token, body: { progress: { pct: 50 } } },
    { token, body: {} },
    { token, body: { progress: 'late' } },
  ]);
  assert.deepEqual(completions, [
    {
      status: 'completed',
      response: { first: { ok: true }, second: { ok: true }, third: { ok: false, status: 409 }, token: true },
    },
  ]);
});

test('a heartbeat that cannot be delivered resolves with the failure instead of throwing', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  hub.handle('/heartbeat', (req, res) => res.writeHead(500).end('{}'));
  const completions = [];
  hub.handle('/complete', async (req, res) => {
    completions.push(await bodyOf(req));
    res.end('{}');
  });
  const tool = makeBundle(`
export default {
  async execute(ctx, input) {
    return { refused: await ctx.asyncTool.heartbeat(1) };
  },
};
`);
  assert.deepEqual(await invoke(socket, withHeartbeats(hub, tool, null)), [{ t: 'launched' }]);
  await until(() => completions.length === 1);
  // Three attempts: the first and two retries of the 5xx.
  assert.equal(hub.count('/heartbeat'), 3);
  assert.deepEqual(completions, [{ status: 'completed', response: { refused: { ok: false, status: 500 } } }]);

  // An address nothing listens on: a network error, reported, not thrown.
  const closed = invokeRequest(heartbeatTool, {
    async: {
      completeUrl: `${hub.url}/complete`,
      completionToken: 't',
      heartbeatUrl: 'http://127.0.0.1:9/heartbeat',
    },
  });
  assert.deepEqual(await invoke(socket, closed), [{ t: 'launched' }]);
  await until(() => completions.length === 2);
  const { response } = completions[1];
  assert.equal(response.first.ok, false);
  assert.equal(typeof response.first.error, 'string');
});

test('the worker pings heartbeatUrl while a detached call runs, and stops once it is delivered', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const gate = deferred();
  hub.handle('/gate', async (req, res) => {
    await gate.promise;
    res.end('go');
  });
  const pings = [];
  hub.handle('/heartbeat', async (req, res) => {
    pings.push({ token: req.headers['x-job-token'], body: await bodyOf(req) });
    // One failed ping is not fatal: the next one follows.
    res.writeHead(pings.length === 1 ? 500 : 200).end('{}');
  });
  let completed = false;
  hub.handle('/complete', (req, res) => {
    completed = true;
    res.end('{}');
  });
  const request = withHeartbeats(hub, gatedTool, { job: 'j3', gate: `${hub.url}/gate` }, { livenessIntervalMs: 50 });
  assert.deepEqual(await invoke(socket, request), [{ t: 'launched' }]);
  await until(() => pings.length >= 4);
  assert.deepEqual(pings[0], { token: 'job-token-2', body: { liveness: true } });
  assert.equal((await health(socket)).inflight, 1, 'a background call counts as in flight');
  gate.resolve();
  await until(() => completed);
  await until(async () => (await health(socket)).inflight === 0);
  const after = pings.length;
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(pings.length, after, 'no pings once the call is over');
  assert.ok(pings.every((ping) => ping.body.liveness === true && ping.token === 'job-token-2'));
});

test('a completion endpoint that never answers is tried again after the attempt timeout', TEST, async (t) => {
  const { socket } = await startTestWorker(t, { env: { TOOLSERVER_CALLBACK_TIMEOUT_MS: '300' } });
  const hub = await startHub(t);
  hub.handle('/gate', (req, res) => res.end('go'));
  const posted = [];
  hub.handle('/complete', async (req, res) => {
    posted.push(await bodyOf(req));
    // The first attempt hangs: headers never come.
    if (posted.length > 1) res.end('{}');
  });
  assert.deepEqual(await invoke(socket, detached(hub, { job: 'j4' })), [{ t: 'launched' }]);
  await until(() => posted.length === 2);
  assert.deepEqual(posted[1], { status: 'completed', response: { done: 'j4', resultId: 'r-1' } });
});

test('an outcome is kept and delivered to a server that stops answering for a while', { timeout: 30_000 }, async (t) => {
  const { socket } = await startTestWorker(t, { env: { TOOLSERVER_CALLBACK_TIMEOUT_MS: '200' } });
  const hub = await startHub(t);
  hub.handle('/gate', (req, res) => res.end('go'));
  // Like a paused server: for 8 s no attempt is answered (each one times out).
  const answersFrom = Date.now() + 8_000;
  const posted = [];
  hub.handle('/complete', async (req, res) => {
    posted.push(await bodyOf(req));
    if (Date.now() >= answersFrom) res.end('{}');
  });
  const request = detached(hub, { job: 'j5' });
  request.async.completionRetryMs = 20_000;
  assert.deepEqual(await invoke(socket, request), [{ t: 'launched' }]);
  await until(() => Date.now() >= answersFrom && posted.length > 0);
  const attemptsWhilePaused = posted.length;
  await until(() => posted.length > attemptsWhilePaused);
  assert.deepEqual(posted.at(-1), { status: 'completed', response: { done: 'j5', resultId: 'r-1' } });
  await until(async () => (await health(socket)).inflight === 0);
});

test('heartbeat and liveness fields are validated', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const base = { completeUrl: 'http://127.0.0.1:9/complete', completionToken: 't' };
  const cases = [
    [{ ...base, heartbeatUrl: 'ftp://x/heartbeat' }, /async\.heartbeatUrl must be an http\(s\) URL/],
    [{ heartbeatUrl: 'http://127.0.0.1:9/heartbeat' }, /async\.completionToken .* with async\.heartbeatUrl/],
    [{ ...base, livenessIntervalMs: 0 }, /async\.livenessIntervalMs/],
    [{ ...base, livenessIntervalMs: 1.5 }, /async\.livenessIntervalMs/],
    [{ ...base, livenessIntervalMs: '1000' }, /async\.livenessIntervalMs/],
    [{ ...base, inlineMs: 0 }, /async\.inlineMs/],
    [{ ...base, inlineMs: '250' }, /async\.inlineMs/],
    [{ ...base, completionRetryMs: 0 }, /async\.completionRetryMs/],
    [{ ...base, completionRetryMs: 'soon' }, /async\.completionRetryMs/],
  ];
  for (const [async, error] of cases) {
    const { status, body } = await sendJson(socket, 'POST', '/invoke', invokeRequest(gatedTool, { async }));
    assert.equal(status, 400, JSON.stringify(async));
    assert.match(body.error, error);
  }
});

// Yields once, waits for input.gate when one is given, yields again and ends.
const steppingTool = makeBundle(`
export default {
  async *execute(ctx, input) {
    yield { step: 1 };
    if (input.gate) await (await fetch(input.gate)).text();
    yield { step: 2 };
  },
};
`);

function inlineFor(hub, input, inlineMs) {
  return invokeRequest(steppingTool, {
    input,
    async: { completeUrl: `${hub.url}/complete`, completionToken: 'job-token-3', inlineMs },
  });
}

test('a detached call that ends within inlineMs answers in its launch and posts nothing', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const posted = [];
  hub.handle('/complete', async (req, res) => {
    posted.push(await bodyOf(req));
    res.end('{}');
  });
  const frames = await invoke(socket, inlineFor(hub, {}, 2000));
  assert.deepEqual(frames, [{ t: 'chunk', value: { step: 1 } }, { t: 'chunk', value: { step: 2 } }, { t: 'end' }]);
  await until(async () => (await health(socket)).inflight === 0);
  // A completion would be posted at once; none is.
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.deepEqual(posted, []);
});

test('a detached call that outlives inlineMs sends its chunks so far, then launched, and posts its outcome', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const gate = deferred();
  hub.handle('/gate', async (req, res) => {
    await gate.promise;
    res.end('go');
  });
  const posted = [];
  hub.handle('/complete', async (req, res) => {
    posted.push(await bodyOf(req));
    res.end('{}');
  });
  const frames = await invoke(socket, inlineFor(hub, { gate: `${hub.url}/gate` }, 100));
  assert.deepEqual(frames, [{ t: 'chunk', value: { step: 1 } }, { t: 'launched' }]);
  assert.equal((await health(socket)).inflight, 1, 'the same call goes on in the background');
  gate.resolve();
  await until(() => posted.length === 1);
  assert.deepEqual(posted, [{ status: 'completed', response: { step: 2 } }]);
});

test('a launch given up inside its inline window stops the call, which posts that it failed', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  hub.handle('/gate', () => {});
  const posted = [];
  hub.handle('/complete', async (req, res) => {
    posted.push(await bodyOf(req));
    res.end('{}');
  });
  const call = await openInvoke(socket, inlineFor(hub, { gate: `${hub.url}/gate` }, 60_000));
  assert.deepEqual(await call.next(), { t: 'chunk', value: { step: 1 } });
  await hub.hits('/gate');
  call.res.destroy();
  await until(() => posted.length === 1);
  assert.deepEqual(posted, [{ status: 'failed', error: 'the call ended without a result' }]);
  await until(async () => (await health(socket)).inflight === 0);
});
