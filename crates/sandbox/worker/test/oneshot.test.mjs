// oneshot.mjs: one request on stdin, NDJSON frames on stdout, exit 0.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { invokeRequest, makeBundle, runOneshot, tempDir } from './helpers.mjs';

const TEST = { timeout: 10_000 };

test('a plain return is a final frame', TEST, async (t) => {
  const cache = await tempDir(t);
  const tool = makeBundle('export default { async execute(ctx, input) { return { sum: input.a + input.b } } };');
  const result = await runOneshot(invokeRequest(tool, { input: { a: 2, b: 3 } }), cache);
  assert.deepEqual(result.frames, [{ t: 'final', value: { sum: 5 } }]);
  assert.equal(result.code, 0);
  assert.deepEqual(await readFile(join(cache, tool.sha256, 'bundle.mjs')), tool.bytes);
});

test('a generator is drained to its last value, reported as one final frame', TEST, async (t) => {
  const cache = await tempDir(t);
  const tool = makeBundle(`
export default {
  async *execute(ctx, input) {
    for (let i = 1; i <= input.n; i++) yield { i };
  },
};
`);
  for (const [n, value] of [[3, { i: 3 }], [0, null]]) {
    const result = await runOneshot(invokeRequest(tool, { input: { n } }), cache);
    assert.deepEqual(result.frames, [{ t: 'final', value }]);
    assert.equal(result.code, 0);
  }
});

test('a throw is an error frame', TEST, async (t) => {
  const tool = makeBundle("export default { execute() { throw new TypeError('bad input'); } };");
  const result = await runOneshot(invokeRequest(tool), await tempDir(t));
  assert.deepEqual(result.frames, [{ t: 'error', name: 'TypeError', message: 'bad input' }]);
  assert.equal(result.code, 0);
});

test('console output becomes log frames and never corrupts stdout', TEST, async (t) => {
  const tool = makeBundle(`
console.log('loading');
export default {
  execute(ctx) {
    console.log('hello', { a: 1 });
    console.dir({ b: 2 });
    console.error('oops');
    ctx.log('via ctx');
    return 'ok';
  },
};
`);
  const result = await runOneshot(invokeRequest(tool), await tempDir(t));
  assert.deepEqual(result.frames, [
    { t: 'log', level: 'log', message: 'loading' },
    { t: 'log', level: 'log', message: 'hello { a: 1 }' },
    { t: 'log', level: 'log', message: '{ b: 2 }' },
    { t: 'log', level: 'error', message: 'oops' },
    { t: 'log', level: 'info', message: 'via ctx' },
    { t: 'final', value: 'ok' },
  ]);
});

test('the deadline ends a tool that keeps the process busy, and the process exits', TEST, async (t) => {
  const tool = makeBundle(`
export default {
  async *execute() {
    setInterval(() => {}, 1000);
    yield 1;
    await new Promise(() => {});
  },
};
`);
  const result = await runOneshot(invokeRequest(tool, { deadlineMs: 200 }), await tempDir(t));
  assert.deepEqual(result.frames, [{ t: 'error', name: 'DeadlineExceeded', message: 'deadline of 200 ms exceeded' }]);
  assert.equal(result.code, 0);
});

test('a malformed request is a BadRequest error frame', TEST, async (t) => {
  const result = await runOneshot('{"callId":', await tempDir(t));
  assert.equal(result.frames.length, 1);
  assert.equal(result.frames[0].name, 'BadRequest');
  assert.equal(result.code, 0);
});

test('behind a shared egress proxy, fetch presents the call\'s egress token', TEST, async (t) => {
  const heads = [];
  const proxy = net.createServer((socket) => {
    socket.once('data', (chunk) => {
      heads.push(chunk.toString('latin1'));
      socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 7\r\n\r\nrefused');
    });
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  t.after(() => proxy.close());
  const tool = makeBundle(`
export default {
  async execute() {
    try { await fetch('http://api.example.test/'); return 'reached'; }
    catch (err) { return err.cause?.message ?? err.message; }
  },
};
`);
  const request = { ...invokeRequest(tool), egressToken: 'header.payload.signature' };
  const env = { TOOLSERVER_EGRESS_PROXY: `127.0.0.1:${proxy.address().port}` };
  const result = await runOneshot(request, await tempDir(t), env);
  assert.deepEqual(result.frames, [{ t: 'final', value: 'refused' }]);
  assert.equal(heads.length, 1);
  assert.match(heads[0], /^CONNECT api\.example\.test:80 HTTP\/1\.1\r\n/);
  assert.match(heads[0], /\r\nproxy-authorization: Bearer header\.payload\.signature\r\n/);
});
