// What the resume tests share: a turn started through a transport and left
// at its tool call, as a page reload would leave it.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

// Sends a user message on `transport` and reads chunks until the tool call's
// input is available, then aborts the request; returns the chunks read.
export async function sendAndLeaveAtToolCall(transport, chatId) {
  const leaving = new AbortController();
  const first = await transport.sendMessages({
    chatId,
    trigger: 'submit-message',
    messageId: undefined,
    messages: [{ id: randomUUID(), role: 'user', parts: [{ type: 'text', text: 'go' }] }],
    abortSignal: leaving.signal,
  });
  const reader = first.getReader();
  const seen = [];
  while (!seen.some((chunk) => chunk.type === 'tool-input-available')) {
    const { value, done } = await reader.read();
    assert.ok(!done, `the turn ended before its tool call: ${JSON.stringify(seen)}`);
    seen.push(value);
  }
  leaving.abort();
  await reader.cancel().catch(() => {});
  return seen;
}

// The text parts of a UI message, joined.
export function textOf(message) {
  return message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');
}
