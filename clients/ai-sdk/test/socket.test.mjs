// The AI SDK 7 `WebSocketChatTransport`, unmodified, against
// `GET /agents/{agentId}/ws` (Node has no global WebSocket before 22, so the
// `ws` package is the constructor; the token travels as a subprotocol, as a
// browser would send it):
// - a turn sent over one socket, left mid-turn (a page reload), and resumed
//   on a new transport from its `start` chunk to its end;
// - a detached turn (`POST /agents/{id}/async`) whose async tool finishes
//   later: resuming the conversation over the socket answers each run when
//   it streams, so the continuation arrives without the page polling.
//
// Driven by the Rust test `real_client` with the scenarios file's `socket`
// section: `{ agentId, expectText, expectOutput, detached: { agentId,
// expectText } }`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import * as sdk from 'ai-v7';
import { sendAndLeaveAtToolCall, textOf } from '../lib/turns.mjs';

const ENV = ['TOOLSERVER_URL', 'TOOLSERVER_TOKEN', 'TOOLSERVER_SCENARIOS'];

function transportFor(url, token, agentId) {
  return new sdk.WebSocketChatTransport({
    url: `${url.replace(/^http/, 'ws')}/agents/${agentId}/ws`,
    protocols: ['toolserver.chat.v1', `bearer.${token}`],
    webSocket: WebSocket,
  });
}

async function lastMessage(stream) {
  let message;
  for await (const built of sdk.readUIMessageStream({ stream })) message = built;
  return message;
}

async function sendLeaveAndResume({ url, token, agentId, expectText, expectOutput }) {
  const chatId = `socket-${randomUUID()}`;
  const page = transportFor(url, token, agentId);
  assert.equal(await page.reconnectToStream({ chatId }), null, 'nothing to resume before the turn');
  const seen = await sendAndLeaveAtToolCall(page, chatId);
  page.close();

  const reloaded = transportFor(url, token, agentId);
  const resumed = await reloaded.reconnectToStream({ chatId });
  assert.ok(resumed, 'the running turn can be resumed over a new socket');
  const message = await lastMessage(resumed);
  assert.equal(message.id, seen[0].messageId, 'the resume rebuilds the same message');
  const tool = message.parts.find((part) => part.type.startsWith('tool-'));
  assert.equal(tool?.state, 'output-available', JSON.stringify(message.parts));
  assert.deepEqual(tool.output, expectOutput);
  assert.equal(textOf(message), expectText);
  assert.equal(await reloaded.reconnectToStream({ chatId }), null, 'nothing to resume after the end');
  reloaded.close();
}

async function detachedResultArrives({ url, token, detached }) {
  const chatId = `socket-detached-${randomUUID()}`;
  const started = await fetch(`${url}/agents/${detached.agentId}/async`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      id: chatId,
      trigger: 'submit-message',
      messages: [{ id: randomUUID(), role: 'user', parts: [{ type: 'text', text: 'run it' }] }],
    }),
  });
  assert.equal(started.status, 202, await started.clone().text());
  const page = transportFor(url, token, detached.agentId);
  const texts = [];
  for (let run = 0; run < 3 && !texts.join('').endsWith(detached.expectText); run += 1) {
    const stream = await page.reconnectToStream({ chatId });
    assert.ok(stream, `run ${run}: the socket answers when the turn streams, not with no-active`);
    texts.push(textOf(await lastMessage(stream)));
  }
  assert.ok(texts.join('').endsWith(detached.expectText), JSON.stringify(texts));
  const status = await fetch(`${url}/async/${(await started.json()).statusId}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  assert.equal(status.status, 200, 'GET /async/{id} keeps working');
  page.close();
}

const missing = ENV.filter((name) => !process.env[name]);
if (missing.length > 0) {
  test('ai-sdk WebSocket transport (driven by the Rust test real_client)', () => {
    assert.fail(`missing ${missing.join(', ')}; run the Rust test \`real_client\` (crates/api/tests/api/real_client.rs)`);
  });
} else {
  const { socket } = JSON.parse(readFileSync(process.env.TOOLSERVER_SCENARIOS, 'utf8'));
  const server = { url: process.env.TOOLSERVER_URL, token: process.env.TOOLSERVER_TOKEN };
  test('v7 WebSocketChatTransport: a turn left mid-way is resumed on a new socket', { timeout: 60_000 }, () => {
    assert.equal(typeof socket?.agentId, 'string', 'the scenarios file has a socket section');
    return sendLeaveAndResume({ ...server, ...socket });
  });
  test('v7 WebSocketChatTransport: a detached result arrives without polling', { timeout: 60_000 }, () => {
    assert.equal(typeof socket?.detached?.agentId, 'string', 'the socket section names a detached agent');
    return detachedResultArrives({ ...server, ...socket });
  });
}
