// The exec helpers of pod runners: launch.mjs starts one detached worker per
// socket (and reuses a healthy one), bridge.mjs carries HTTP between
// stdin/stdout and the socket, launch.mjs --stop kills even a hung worker.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { text } from 'node:stream/consumers';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { health, invoke, invokeRequest, makeBundle, tempDir } from './helpers.mjs';

const WORKER_DIR = fileURLToPath(new URL('..', import.meta.url));
const TEST = { timeout: 15_000 };

function run(script, args, { input, env = {} } = {}) {
  const child = spawn(process.execPath, [join(WORKER_DIR, script), ...args], {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  if (input !== undefined) child.stdin.end(input);
  return child;
}

async function finish(child) {
  const [stdout, stderr, [code]] = await Promise.all([text(child.stdout), text(child.stderr), once(child, 'exit')]);
  return { stdout, stderr, code };
}

async function launch(socket, dir, extra = []) {
  const result = await finish(run('launch.mjs', ['--socket', socket, ...extra], { env: { TOOLSERVER_CACHE_ROOTS: join(dir, 'cache') } }));
  return { ...result, answer: result.stdout ? JSON.parse(result.stdout) : null };
}

/** Whether `pid` runs (a killed worker may linger as a zombie until reaped). */
function alive(pid) {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

async function stopped(socket) {
  await finish(run('launch.mjs', ['--socket', socket, '--stop']));
}

/**
 * A temporary directory and a socket path in it whose worker is stopped
 * after the test, before the directory (and the pid file) is removed:
 * after-hooks run in the order they were registered.
 */
async function workerDir(t) {
  let socket;
  t.after(() => stopped(socket));
  const dir = await tempDir(t);
  socket = join(dir, 'w.sock');
  return { dir, socket };
}

test('launch starts a detached worker once and then reuses it', TEST, async (t) => {
  const { dir, socket } = await workerDir(t);
  const first = await launch(socket, dir);
  assert.equal(first.code, 0, first.stderr);
  assert.equal(first.answer.ready, true);
  assert.equal(first.answer.started, true);
  assert.equal(Number(readFileSync(`${socket}.pid`, 'utf8')), first.answer.pid);
  assert.equal((await health(socket)).pid, first.answer.pid);

  const second = await launch(socket, dir);
  assert.deepEqual(second.answer, { ready: true, started: false, pid: first.answer.pid });
});

test('concurrent launchers start a single worker', TEST, async (t) => {
  const { dir, socket } = await workerDir(t);
  const answers = await Promise.all([1, 2, 3].map(() => launch(socket, dir)));
  const pids = new Set(answers.map((a) => a.answer.pid));
  assert.equal(pids.size, 1, JSON.stringify(answers));
  assert.equal(answers.filter((a) => a.answer.started).length, 1);
});

test('the bridge carries a streaming invoke and stop kills a hung worker', TEST, async (t) => {
  const { dir, socket } = await workerDir(t);
  const { answer } = await launch(socket, dir);
  const tool = makeBundle(`
export default {
  async *execute(ctx, input) {
    yield 1;
    yield input.n;
  },
};
`);
  const body = JSON.stringify(invokeRequest(tool, { input: { n: 2 } }));
  const request = `POST /invoke HTTP/1.1\r\nhost: worker\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
  const bridge = run('bridge.mjs', ['--socket', socket]);
  bridge.stdin.write(request);
  const { stdout, code } = await finish(bridge);
  assert.equal(code, 0);
  assert.match(stdout, /^HTTP\/1.1 200/);
  const frames = stdout
    .split('\r\n\r\n')
    .slice(1)
    .join('')
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line));
  assert.deepEqual(frames, [{ t: 'chunk', value: 1 }, { t: 'chunk', value: 2 }, { t: 'end' }]);

  // Block the worker's event loop, so it cannot answer anything.
  const hang = makeBundle('export default { execute() { for (;;) {} } };');
  const hung = invoke(socket, invokeRequest(hang, { deadlineMs: 60_000 })).catch(() => 'closed');
  await new Promise((resolve) => setTimeout(resolve, 300));
  await stopped(socket);
  assert.equal(alive(answer.pid), false, 'the worker is dead once stop has answered');
  assert.equal(await hung, 'closed');
  const relaunched = await launch(socket, dir);
  assert.equal(relaunched.answer.started, true);
  assert.notEqual(relaunched.answer.pid, answer.pid);
});

test('a bridge to a socket nobody serves fails without writing to stdout', TEST, async (t) => {
  const dir = await tempDir(t);
  const { stdout, stderr, code } = await finish(run('bridge.mjs', ['--socket', join(dir, 'none.sock')], { input: '' }));
  assert.equal(code, 1);
  assert.equal(stdout, '');
  assert.match(stderr, /bridge: .*ENOENT/);
});
