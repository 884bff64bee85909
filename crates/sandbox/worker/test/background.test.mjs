// Detached calls: with async.completeUrl the worker answers one `launched`
// frame at once, runs the call in the background, keeps its logs, and posts
// the outcome itself with the call's job token, retrying only answers that
// may succeed later.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { deferred, invoke, invokeRequest, makeBundle, sendJson, startHub, startTestWorker } from './helpers.mjs';

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
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 10));
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
