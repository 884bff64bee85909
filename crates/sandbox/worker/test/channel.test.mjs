// The pod-network channel: the worker's API on TCP behind the runner's
// bearer secret, and its settings taken out of the environment tools see.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { authorized, channelSettings } from '../channel.mjs';
import { invokeRequest, makeBundle, startTestWorker } from './helpers.mjs';

const TEST = { timeout: 10_000 };
const SECRET = randomBytes(32).toString('hex');

/** A TCP port nothing listens on right now. */
async function freePort() {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const envTool = makeBundle(`
export default {
  execute() {
    return Object.keys(process.env).filter((name) => name.startsWith('TOOLSERVER_CHANNEL'));
  },
};
`);

test('the channel serves the API only with the bearer secret, and tools never see it', TEST, async (t) => {
  const port = await freePort();
  await startTestWorker(t, {
    env: { TOOLSERVER_CHANNEL_PORT: String(port), TOOLSERVER_CHANNEL_HOST: '127.0.0.1', TOOLSERVER_CHANNEL_SECRET: SECRET },
  });
  const base = `http://127.0.0.1:${port}`;

  const anonymous = await fetch(`${base}/health`);
  assert.equal(anonymous.status, 401);
  assert.match((await anonymous.json()).error, /bearer secret/);
  const wrong = await fetch(`${base}/health`, { headers: { authorization: `Bearer ${SECRET.slice(1)}x` } });
  assert.equal(wrong.status, 401);

  const headers = { authorization: `Bearer ${SECRET}` };
  const health = await fetch(`${base}/health`, { headers });
  assert.equal(health.status, 200);
  assert.equal((await health.json()).ok, true);

  const call = await fetch(`${base}/invoke`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(invokeRequest(envTool)),
  });
  assert.equal(call.status, 200);
  const frames = (await call.text()).trim().split('\n').map((line) => JSON.parse(line));
  assert.deepEqual(frames.at(-1), { t: 'final', value: [] });
});

test('channel settings are checked and cleared', () => {
  assert.equal(channelSettings({}), null);
  const env = { TOOLSERVER_CHANNEL_PORT: '8790', TOOLSERVER_CHANNEL_SECRET: SECRET, TOOLSERVER_CHANNEL_HOST: '10.0.0.7' };
  assert.deepEqual(channelSettings(env), { port: 8790, host: '10.0.0.7', secret: SECRET });
  assert.deepEqual(env, {});
  assert.throws(() => channelSettings({ TOOLSERVER_CHANNEL_PORT: 'x', TOOLSERVER_CHANNEL_SECRET: SECRET }), /TCP port/);
  assert.throws(() => channelSettings({ TOOLSERVER_CHANNEL_PORT: '1', TOOLSERVER_CHANNEL_SECRET: 'short' }), /at least 32/);
  assert.equal(authorized(`Bearer ${SECRET}`, SECRET), true);
  assert.equal(authorized(SECRET, SECRET), false);
  assert.equal(authorized(undefined, SECRET), false);
});
