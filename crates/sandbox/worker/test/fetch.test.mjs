// ctx.fetch: the tool's request goes to the server's fetch route with the
// call's grant, and comes back as a Response; a refusal is a TypeError.

import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { invokeRequest, makeBundle, runOneshot, tempDir } from './helpers.mjs';

const TEST = { timeout: 10_000 };

// A stand-in for POST /runner/fetch: records what it got, answers `answer`.
async function fetchRoute(t, answer) {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      seen.push({ method: req.method, path: req.url, grant: req.headers['x-fetch-grant'], body: JSON.parse(body) });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(answer));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  return { url: `http://127.0.0.1:${server.address().port}/runner/fetch`, seen };
}

const FETCHER = makeBundle(`
export default { async execute(ctx, input) {
  try {
    const answer = await ctx.fetch(input.url, { method: 'POST', headers: { authorization: 'Bearer {{secret.K}}' }, body: 'ping' });
    return { status: answer.status, type: answer.headers.get('content-type'), text: await answer.text() };
  } catch (err) { return { error: err.name + ': ' + err.message }; }
} };
`);

test('ctx.fetch posts the request with the grant and reads the answer', TEST, async (t) => {
  const route = await fetchRoute(t, {
    response: { status: 201, headers: [['content-type', 'text/plain']], bodyBase64: Buffer.from('pong').toString('base64') },
  });
  const request = invokeRequest(FETCHER, { input: { url: 'https://api.example.com/x' }, fetch: { url: route.url, grant: 'g-1' } });
  const result = await runOneshot(request, await tempDir(t));
  assert.deepEqual(result.frames, [{ t: 'final', value: { status: 201, type: 'text/plain', text: 'pong' } }]);
  assert.deepEqual(route.seen, [{
    method: 'POST',
    path: '/runner/fetch',
    grant: 'g-1',
    body: {
      url: 'https://api.example.com/x',
      method: 'POST',
      headers: [['authorization', 'Bearer {{secret.K}}']],
      bodyBase64: Buffer.from('ping').toString('base64'),
    },
  }]);
});

test('a request the server could not make is a TypeError', TEST, async (t) => {
  const route = await fetchRoute(t, { error: { kind: 'refused', message: 'x.test is not in the allow list' } });
  const request = invokeRequest(FETCHER, { input: { url: 'https://x.test/' }, fetch: { url: route.url, grant: 'g' } });
  const result = await runOneshot(request, await tempDir(t));
  assert.deepEqual(result.frames, [{ t: 'final', value: { error: 'TypeError: ctx.fetch: x.test is not in the allow list' } }]);
});

test('without fetch access ctx.fetch is not offered, and bad access is refused', TEST, async (t) => {
  const tool = makeBundle('export default { execute(ctx) { return typeof ctx.fetch; } };');
  const plain = await runOneshot(invokeRequest(tool), await tempDir(t));
  assert.deepEqual(plain.frames, [{ t: 'final', value: 'undefined' }]);
  const bad = await runOneshot(invokeRequest(tool, { fetch: { url: 'ftp://x', grant: 'g' } }), await tempDir(t));
  assert.equal(bad.frames[0].t, 'error');
  assert.match(bad.frames[0].message, /fetch must be/);
});
