// Resuming a turn with the AI SDK's own transport: for each pinned major,
// `DefaultChatTransport` starts a turn, the client goes away mid-turn (a page
// reload), and `reconnectToStream` — what `useChat({ resume: true })` calls
// on mount — gets the whole turn from its `start` chunk and then live to its
// end; `readUIMessageStream` builds the complete assistant message, which is
// also what the server stored. Before the turn and after its end there is
// nothing to resume (the transport answers null on 204).
//
// Driven by the Rust test `real_client` with the scenarios file's `resume`
// section: `{ "agentId" }` of an agent whose turn calls a slow tool, then
// answers in text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import * as v6 from 'ai-v6';
import * as v7 from 'ai-v7';
import { sendAndLeaveAtToolCall, textOf } from '../lib/turns.mjs';

const MAJORS = { v6, v7 };
const ENV = ['TOOLSERVER_URL', 'TOOLSERVER_TOKEN', 'TOOLSERVER_SCENARIOS'];

async function resumeAfterLeaving(sdk, { url, token, agentId, expectText, expectOutput }) {
  const chatId = `resume-${randomUUID()}`;
  const headers = { authorization: `Bearer ${token}` };
  const transport = new sdk.DefaultChatTransport({ api: `${url}/agents/${agentId}/chat`, headers });
  assert.equal(await transport.reconnectToStream({ chatId }), null, 'nothing to resume before the turn');

  const seen = await sendAndLeaveAtToolCall(transport, chatId);

  const resumed = await transport.reconnectToStream({ chatId });
  assert.ok(resumed, 'the running turn can be resumed');
  let message;
  for await (const built of sdk.readUIMessageStream({ stream: resumed })) message = built;
  assert.equal(message.id, seen[0].messageId, 'the resume rebuilds the same message');
  const tool = message.parts.find((part) => part.type.startsWith('tool-'));
  assert.equal(tool?.state, 'output-available', JSON.stringify(message.parts));
  assert.deepEqual(tool.output, expectOutput);
  assert.equal(textOf(message), expectText);

  const stored = await fetch(`${url}/conversations/${encodeURIComponent(chatId)}`, { headers });
  assert.equal(stored.status, 200);
  const [, assistant] = (await stored.json()).messages;
  assert.equal(assistant.id, message.id);
  assert.deepEqual(
    assistant.parts.map((part) => part.type),
    message.parts.map((part) => part.type),
  );
  assert.equal(await transport.reconnectToStream({ chatId }), null, 'nothing to resume after the end');
}

const missing = ENV.filter((name) => !process.env[name]);
if (missing.length > 0) {
  test('ai-sdk resume (driven by the Rust test real_client)', () => {
    assert.fail(`missing ${missing.join(', ')}; run the Rust test \`real_client\` (crates/api/tests/api/real_client.rs)`);
  });
} else {
  const { resume } = JSON.parse(readFileSync(process.env.TOOLSERVER_SCENARIOS, 'utf8'));
  for (const [major, sdk] of Object.entries(MAJORS)) {
    test(`${major}: useChat's resume gets the whole running turn after a reload`, { timeout: 60_000 }, () => {
      assert.equal(typeof resume?.agentId, 'string', 'the scenarios file has a resume section');
      return resumeAfterLeaving(sdk, {
        url: process.env.TOOLSERVER_URL,
        token: process.env.TOOLSERVER_TOKEN,
        ...resume,
      });
    });
  }
}
