// A real AI SDK client against a running toolserver: for each pinned major of
// the published `ai` package (6.x as `ai-v6`, 7.x as `ai-v7`) and each
// scenario, it drives a conversation the way `useChat` does, reads every
// stream with that major's `parseJsonEventStream` + `uiMessageChunkSchema`
// and `readUIMessageStream`, and fails on any framing, schema, field or
// ordering error. It then checks the final assistant message and the
// conversation the server stored.
//
// Driven by the Rust test `real_client` (crates/api/tests/api/real_client.rs),
// which starts the server, writes the scenarios file and sets
// TOOLSERVER_URL, TOOLSERVER_TOKEN and TOOLSERVER_SCENARIOS.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import * as v6 from 'ai-v6';
import * as v7 from 'ai-v7';

const MAJORS = { v6, v7 };
const ENV = ['TOOLSERVER_URL', 'TOOLSERVER_TOKEN', 'TOOLSERVER_SCENARIOS'];
const REQUEST_TIMEOUT_MS = Number(process.env.TOOLSERVER_REQUEST_TIMEOUT_MS ?? 60_000);

// The fields the protocol defines for each chunk type: the union of
// `uiMessageChunkSchema` in ai@6.0.326 (dist/index.mjs). The schemas are
// loose objects, so a field outside this list would pass them silently.
// Types and fields that only 7.x knows (reset-step, custom, reasoning-file,
// steering-message, tool-approval-response, text-end.citations, ...) are
// left out on purpose: the server has to speak what both majors read.
const TOOL_CALL_FIELDS = ['toolCallId', 'providerExecuted', 'providerMetadata', 'toolMetadata', 'dynamic'];
const CHUNK_FIELDS = {
  'text-start': ['id', 'providerMetadata'],
  'text-delta': ['id', 'delta', 'providerMetadata'],
  'text-end': ['id', 'providerMetadata'],
  'error': ['errorText'],
  'tool-input-start': [...TOOL_CALL_FIELDS, 'toolName', 'inputEncoding', 'title'],
  'tool-input-delta': ['toolCallId', 'inputTextDelta'],
  'tool-input-available': [...TOOL_CALL_FIELDS, 'toolName', 'input', 'title'],
  'tool-input-error': [...TOOL_CALL_FIELDS, 'toolName', 'input', 'errorText', 'title'],
  'tool-approval-request': ['approvalId', 'toolCallId', 'approvalDescriptor', 'inputSchemaInput', 'signature'],
  'tool-output-available': [...TOOL_CALL_FIELDS, 'output', 'preliminary'],
  'tool-output-error': [...TOOL_CALL_FIELDS, 'errorText'],
  'tool-output-denied': ['toolCallId'],
  'reasoning-start': ['id', 'providerMetadata'],
  'reasoning-delta': ['id', 'delta', 'providerMetadata'],
  'reasoning-end': ['id', 'providerMetadata'],
  'source-url': ['sourceId', 'url', 'title', 'providerMetadata'],
  'source-document': ['sourceId', 'mediaType', 'title', 'filename', 'providerMetadata'],
  'file': ['url', 'mediaType', 'providerMetadata'],
  'start-step': [],
  'finish-step': [],
  'start': ['messageId', 'messageMetadata'],
  'finish': ['finishReason', 'messageMetadata'],
  'abort': ['reason'],
  'message-metadata': ['messageMetadata'],
};
const DATA_CHUNK_FIELDS = ['id', 'data', 'transient']; // `data-*`

function fieldsOf(type) {
  return type.startsWith('data-') ? DATA_CHUNK_FIELDS : CHUNK_FIELDS[type];
}

const json = (value) => JSON.stringify(value, null, 2);

// ---------------------------------------------------------------------------
// Framing: the raw body, as the bytes came.

/** Every frame is `data: <json>` or a `:` comment, frames end in a blank line, the last data frame is `[DONE]`. */
function checkFraming(raw, chunkCount) {
  assert.ok(!raw.includes('\r'), 'frames are separated by \\n, not \\r\\n');
  assert.ok(raw.endsWith('\n\n'), `the body must end with a blank line, it ends with ${JSON.stringify(raw.slice(-40))}`);
  const frames = raw.slice(0, -2).split('\n\n');
  const data = [];
  for (const frame of frames) {
    assert.notEqual(frame, '', 'empty frame (more than one blank line in a row)');
    const lines = frame.split('\n');
    const dataLines = lines.filter((line) => !line.startsWith(':'));
    assert.ok(dataLines.length <= 1, `a frame holds one data line: ${JSON.stringify(frame)}`);
    if (dataLines.length === 0) continue; // keep-alive comment
    const [line] = dataLines;
    assert.ok(line.startsWith('data: '), `not a data frame: ${JSON.stringify(frame)}`);
    data.push(line.slice('data: '.length));
  }
  assert.ok(data.length > 0, 'no data frames');
  assert.equal(data.at(-1), '[DONE]', 'the last data frame must be `data: [DONE]`');
  const payloads = data.slice(0, -1);
  assert.ok(!payloads.includes('[DONE]'), '`data: [DONE]` must come once, last');
  for (const payload of payloads) {
    let value;
    assert.doesNotThrow(() => { value = JSON.parse(payload); }, `data frame is not JSON: ${payload}`);
    assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), `data frame is not a JSON object: ${payload}`);
  }
  assert.equal(payloads.length, chunkCount, 'every JSON data frame is one chunk');
}

// ---------------------------------------------------------------------------
// Ordering, on top of what readUIMessageStream enforces.

const CONTENT = /^(text-|reasoning-|tool-|source-|file$)/;
const TOOL_OUTPUT = new Set(['tool-output-available', 'tool-output-error', 'tool-output-denied']);

/**
 * @param chunks the parsed chunks of one response
 * @param continued null for a new assistant message, else { messageId, answered: Map<toolCallId, approved> }
 */
function checkOrder(chunks, continued) {
  assert.ok(chunks.length > 0, 'the stream holds no chunks');
  const [start] = chunks;
  assert.equal(start.type, 'start', 'the first chunk is `start`');
  if (continued) {
    if (start.messageId !== undefined) {
      assert.equal(start.messageId, continued.messageId, '`start.messageId` of a continuation is the continued message id');
    }
  } else {
    assert.ok(typeof start.messageId === 'string' && start.messageId !== '', '`start` carries the new assistant message id');
  }
  const last = chunks.at(-1);
  assert.equal(last.type, 'finish', 'the last chunk is `finish`');

  let inStep = false;
  let stepsSeen = 0;
  let terminated = null; // the `error`/`abort` chunk, after which only finish-step/finish may come
  const openText = new Set();
  const openReasoning = new Set();
  // toolCallId -> 'streaming' | 'input' | 'input-error' | 'approval' | 'preliminary' | 'output' | 'denied'
  const calls = new Map();

  for (const [i, chunk] of chunks.entries()) {
    const at = `chunk ${i} ${JSON.stringify(chunk)}`;
    if (i > 0) assert.notEqual(chunk.type, 'start', `${at}: a second start`);
    if (i < chunks.length - 1) assert.notEqual(chunk.type, 'finish', `${at}: finish before the end`);
    if (terminated && chunk.type !== 'finish-step' && chunk.type !== 'finish' && chunk.type !== 'error') {
      assert.fail(`${at}: only finish-step/finish may follow ${terminated.type}`);
    }
    const prelude = continued && stepsSeen === 0 && !inStep;
    if (CONTENT.test(chunk.type)) {
      const allowedInPrelude = prelude && TOOL_OUTPUT.has(chunk.type) && continued.answered.has(chunk.toolCallId);
      assert.ok(inStep || allowedInPrelude, `${at}: content outside a step`);
    }
    const id = chunk.id;
    const call = chunk.toolCallId;
    const state = calls.get(call);
    switch (chunk.type) {
      case 'start-step':
        assert.ok(!inStep, `${at}: start-step inside an open step`);
        inStep = true;
        stepsSeen++;
        break;
      case 'finish-step':
        assert.ok(inStep, `${at}: finish-step without an open step`);
        assert.deepEqual([...openText], [], `${at}: text parts not ended before finish-step`);
        assert.deepEqual([...openReasoning], [], `${at}: reasoning parts not ended before finish-step`);
        inStep = false;
        break;
      case 'finish':
        assert.ok(!inStep, `${at}: finish inside an open step`);
        break;
      case 'error':
      case 'abort':
        terminated = chunk;
        break;
      case 'text-start':
        assert.ok(!openText.has(id), `${at}: text part ${id} started twice`);
        openText.add(id);
        break;
      case 'text-delta':
        assert.ok(openText.has(id), `${at}: text-delta outside text-start..text-end of ${id}`);
        break;
      case 'text-end':
        assert.ok(openText.has(id), `${at}: text-end without text-start of ${id}`);
        openText.delete(id);
        break;
      case 'reasoning-start':
        assert.ok(!openReasoning.has(id), `${at}: reasoning part ${id} started twice`);
        openReasoning.add(id);
        break;
      case 'reasoning-delta':
        assert.ok(openReasoning.has(id), `${at}: reasoning-delta outside reasoning-start..reasoning-end of ${id}`);
        break;
      case 'reasoning-end':
        assert.ok(openReasoning.has(id), `${at}: reasoning-end without reasoning-start of ${id}`);
        openReasoning.delete(id);
        break;
      case 'tool-input-start':
        assert.equal(state, undefined, `${at}: tool call ${call} already seen in this stream`);
        calls.set(call, 'streaming');
        break;
      case 'tool-input-delta':
        assert.equal(state, 'streaming', `${at}: tool-input-delta must come after tool-input-start and before tool-input-available`);
        break;
      case 'tool-input-available':
      case 'tool-input-error':
        assert.ok(state === undefined || state === 'streaming', `${at}: input of ${call} after state ${state}`);
        calls.set(call, chunk.type === 'tool-input-available' ? 'input' : 'input-error');
        break;
      case 'tool-approval-request':
        assert.equal(state, 'input', `${at}: approval request needs tool-input-available of ${call} first`);
        calls.set(call, 'approval');
        break;
      case 'tool-output-available':
      case 'tool-output-error':
      case 'tool-output-denied': {
        const answered = continued?.answered.has(call) && state === undefined;
        const preliminary = chunk.type === 'tool-output-available' && chunk.preliminary === true;
        if (chunk.type === 'tool-output-denied') {
          assert.ok(answered, `${at}: tool-output-denied only answers a denied approval`);
          assert.equal(continued.answered.get(call), false, `${at}: ${call} was approved, not denied`);
          calls.set(call, 'denied');
          break;
        }
        if (answered) {
          assert.equal(continued.answered.get(call), true, `${at}: ${call} was denied, expected tool-output-denied`);
        } else if (chunk.type === 'tool-output-error') {
          assert.ok(['input', 'input-error', 'preliminary'].includes(state), `${at}: output of ${call} after state ${state ?? 'none'}`);
        } else {
          assert.ok(['input', 'preliminary'].includes(state), `${at}: output of ${call} after state ${state ?? 'none'}`);
        }
        calls.set(call, preliminary ? 'preliminary' : 'output');
        break;
      }
      case 'source-url':
        assert.ok(inStep, `${at}: source-url outside start-step..finish-step`);
        assert.equal(typeof chunk.sourceId, 'string', `${at}: sourceId`);
        assert.equal(typeof chunk.url, 'string', `${at}: url`);
        break;
      default:
        if (!chunk.type.startsWith('data-') && chunk.type !== 'message-metadata' && chunk.type !== 'start') {
          assert.fail(`${at}: unexpected chunk type`);
        }
    }
  }

  if (!terminated) {
    for (const [call, state] of calls) {
      assert.notEqual(state, 'preliminary', `tool call ${call}: preliminary outputs without a final output`);
      assert.notEqual(state, 'streaming', `tool call ${call}: tool-input-start without tool-input-available`);
    }
    for (const [call, approved] of continued?.answered ?? []) {
      assert.equal(calls.get(call), approved ? 'output' : 'denied', `tool call ${call} (${approved ? 'approved' : 'denied'}) got no ${approved ? 'output' : 'tool-output-denied'} in the continuation`);
    }
  }
  return last.finishReason;
}

// ---------------------------------------------------------------------------
// Expectations.

/** Deep-partial match: every key of `expected` deep-equals the actual value; arrays element-wise, same length. */
function partialMismatch(actual, expected, path) {
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return `${path}: expected an array, got ${JSON.stringify(actual)}`;
    if (actual.length !== expected.length) return `${path}: expected ${expected.length} elements, got ${actual.length}`;
    for (const [i, e] of expected.entries()) {
      const m = partialMismatch(actual[i], e, `${path}[${i}]`);
      if (m) return m;
    }
    return null;
  }
  if (expected !== null && typeof expected === 'object') {
    if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return `${path}: expected an object, got ${JSON.stringify(actual)}`;
    for (const [key, value] of Object.entries(expected)) {
      const m = partialMismatch(actual[key], value, `${path}.${key}`);
      if (m) return m;
    }
    return null;
  }
  return Object.is(actual, expected) ? null : `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
}

function assertPartsMatch(actual, expected) {
  const mismatch = partialMismatch(actual, expected, 'parts');
  if (mismatch) {
    assert.fail(`final assistant message parts do not match (${mismatch})\nexpected (partial):\n${json(expected)}\nactual:\n${json(actual)}`);
  }
}

// ---------------------------------------------------------------------------
// HTTP.

function authHeaders(token) {
  return { authorization: `Bearer ${token}` };
}

async function assertErrorBody(response, expectedStatus) {
  const text = await response.text();
  assert.equal(response.status, expectedStatus, `expected HTTP ${expectedStatus}, got ${response.status}: ${text}`);
  assert.match(response.headers.get('content-type') ?? '', /^application\/json/, 'error bodies are JSON');
  let body;
  assert.doesNotThrow(() => { body = JSON.parse(text); }, `error body is not JSON: ${text}`);
  assert.equal(typeof body?.error?.code, 'string', `error body is { error: { code, message } }: ${text}`);
  assert.ok(body.error.code !== '', `error.code is empty: ${text}`);
  assert.equal(typeof body.error.message, 'string', `error body is { error: { code, message } }: ${text}`);
}

/** Reads one turn stream with the SDK `sdk`; returns { message, finishReason, chunks, errorTexts }. */
async function readTurn(sdk, response, { previous, continued, expectErrorText }) {
  if (response.status !== 200) {
    assert.fail(`expected HTTP 200, got ${response.status}: ${await response.text().catch((e) => `(body: ${e.message})`)}`);
  }
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/, 'content-type');
  assert.match(response.headers.get('cache-control') ?? '', /no-cache/, 'cache-control');
  assert.equal(response.headers.get('x-vercel-ai-ui-message-stream'), 'v1', 'x-vercel-ai-ui-message-stream');
  assert.equal(response.headers.get('x-accel-buffering'), 'no', 'x-accel-buffering');
  assert.ok(response.body, 'no response body');

  const [forSdk, forRaw] = response.body.tee();
  const raw = new Response(forRaw).text().catch((error) => `(reading the body failed: ${error.message})`);
  const chunks = [];
  let rawText = null;
  try {
    for await (const result of sdk.parseJsonEventStream({ stream: forSdk, schema: sdk.uiMessageChunkSchema })) {
      if (!result.success) {
        assert.fail(`chunk ${chunks.length} does not parse against uiMessageChunkSchema: ${result.error?.message ?? result.error}`);
      }
      const rawChunk = result.rawValue ?? result.value;
      const allowed = fieldsOf(rawChunk.type);
      assert.ok(allowed, `chunk ${chunks.length}: unknown chunk type ${rawChunk.type}`);
      for (const key of Object.keys(rawChunk)) {
        assert.ok(key === 'type' || allowed.includes(key), `chunk ${chunks.length}: field \`${key}\` is not defined for ${rawChunk.type}: ${JSON.stringify(rawChunk)}`);
      }
      chunks.push(result.value);
    }
    rawText = await raw;
    checkFraming(rawText, chunks.length);
    const finishReason = checkOrder(chunks, continued);

    const errorTexts = chunks.filter((c) => c.type === 'error').map((c) => c.errorText);
    const errors = [];
    let message = previous;
    let thrown = null;
    try {
      const stream = new ReadableStream({
        start(controller) {
          for (const chunk of chunks) controller.enqueue(chunk);
          controller.close();
        },
      });
      for await (const update of sdk.readUIMessageStream({
        message: previous ? structuredClone(previous) : undefined,
        stream,
        // Collect, don't throw: readUIMessageStream calls onError before it
        // errors its output, so a throwing onError would end the iteration
        // normally and leave the error as an unhandled rejection.
        onError: (error) => errors.push(error),
        terminateOnError: true,
      })) {
        message = update;
      }
    } catch (error) {
      thrown = error;
    }
    if (expectErrorText !== undefined) {
      assert.ok(errorTexts.some((t) => t.includes(expectErrorText)), `no error chunk with ${JSON.stringify(expectErrorText)}; error chunks: ${JSON.stringify(errorTexts)}`);
      assert.ok(thrown && errorTexts.includes(thrown.message), `readUIMessageStream should end with the error chunk, got ${thrown?.stack ?? 'no error'}`);
    } else {
      assert.deepEqual(errorTexts, [], 'unexpected error chunks');
      if (thrown || errors.length) assert.fail(`readUIMessageStream failed: ${(thrown ?? errors[0])?.stack ?? thrown ?? errors[0]}`);
    }
    assert.ok(message, 'readUIMessageStream yielded no message');
    assert.equal(message.role, 'assistant');
    return { message, finishReason, chunks, errorTexts };
  } catch (error) {
    if (rawText === null) rawText = await Promise.race([raw, new Promise((r) => setTimeout(() => r(null), 1000))]);
    if (error && typeof error === 'object' && typeof error.message === 'string') {
      const extra = `\n--- raw stream ---\n${rawText === null ? '(not complete within 1s)' : truncate(rawText)}`;
      error.message += extra;
      if (typeof error.stack === 'string') error.stack += extra; // what the test reporter prints
    }
    throw error;
  }
}

function truncate(text, max = 8000) {
  return text.length > max ? `${text.slice(0, max)}\n… (${text.length - max} more characters)` : text;
}

/** The server persists the conversation as UIMessages: same ids, roles and part type/state sequence. */
async function assertStored(sdk, base, token, conversationId, messages) {
  const response = await fetch(`${base}/conversations/${conversationId}`, {
    headers: authHeaders(token),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await response.text();
  assert.equal(response.status, 200, `GET /conversations/${conversationId}: HTTP ${response.status}: ${text}`);
  const stored = JSON.parse(text);
  assert.ok(Array.isArray(stored.messages), `GET /conversations/${conversationId}: no messages array: ${text}`);
  const shape = (ms) => ms.map((m) => ({ id: m.id, role: m.role, parts: m.parts.map((p) => (p.state === undefined ? p.type : `${p.type}:${p.state}`)) }));
  assert.deepEqual(shape(stored.messages), shape(messages), `the stored conversation differs from the client's messages\nstored:\n${json(stored.messages)}`);
  const valid = await sdk.safeValidateUIMessages({ messages: stored.messages });
  assert.ok(valid.success, `the stored conversation is not valid UIMessage[]: ${valid.error?.message}`);
}

// ---------------------------------------------------------------------------
// Scenarios.

/** One (major, scenario) conversation, as useChat would run it. */
async function runScenario(sdk, env, scenario) {
  const base = env.TOOLSERVER_URL.replace(/\/+$/, '');
  const token = env.TOOLSERVER_TOKEN;
  const conversationId = randomUUID();
  const messages = [];
  let last = null;

  for (const [index, step] of scenario.steps.entries()) {
    const isLast = index === scenario.steps.length - 1;
    const expectErrorText = step.expectErrorText ?? (isLast ? scenario.expectErrorText : undefined);
    const before = structuredClone(messages);
    let body;
    let previous;
    let continued = null;

    if (step.userText !== undefined) {
      messages.push({ id: randomUUID(), role: 'user', parts: [{ type: 'text', text: step.userText }] });
      body = { id: conversationId, messages, trigger: 'submit-message' };
    } else if (step.approval !== undefined) {
      const target = messages.at(-1);
      assert.equal(target?.role, 'assistant', `step ${index}: an approval step needs a last assistant message`);
      const answered = new Map();
      // What addToolApprovalResponse does to each part waiting for approval.
      const updated = {
        ...target,
        parts: target.parts.map((part) => {
          if (part.state !== 'approval-requested') return part;
          answered.set(part.toolCallId, step.approval.approved);
          const id = step.forgeApprovalId ? `forged_${randomUUID()}` : part.approval.id;
          return { ...part, state: 'approval-responded', approval: { ...part.approval, id, approved: step.approval.approved, reason: step.approval.reason } };
        }),
      };
      assert.ok(answered.size > 0, `step ${index}: no tool part in state approval-requested:\n${json(target.parts)}`);
      messages[messages.length - 1] = updated;
      previous = updated;
      continued = { messageId: updated.id, answered };
      body = { id: conversationId, messages, trigger: 'submit-message', messageId: updated.id };
    } else {
      assert.fail(`step ${index}: neither userText nor approval: ${JSON.stringify(step)}`);
    }

    const response = await fetch(`${base}/agents/${scenario.agentId}/chat`, {
      method: 'POST',
      headers: { ...authHeaders(token), 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });

    if (step.expectStatus !== undefined && step.expectStatus !== 200) {
      await assertErrorBody(response, step.expectStatus);
      // Rejected: nothing happened, on either side.
      messages.splice(0, messages.length, ...before);
      await assertStored(sdk, base, token, conversationId, messages);
      continue;
    }

    const result = await readTurn(sdk, response, { previous, continued, expectErrorText });
    if (previous) messages[messages.length - 1] = result.message;
    else messages.push(result.message);
    last = result;
    await assertStored(sdk, base, token, conversationId, messages);
  }

  const final = messages.at(-1);
  assert.equal(final?.role, 'assistant', 'the conversation ends with an assistant message');
  assertPartsMatch(final.parts, scenario.expectParts);
  if (scenario.expectFinishReason !== undefined) {
    assert.ok(last, 'expectFinishReason needs at least one streamed step');
    assert.equal(last.finishReason, scenario.expectFinishReason, 'finishReason of the last finish chunk');
  }
}

function loadScenarios(path) {
  const file = JSON.parse(readFileSync(path, 'utf8'));
  assert.ok(Array.isArray(file?.scenarios) && file.scenarios.length > 0, `${path}: { "scenarios": [...] } with at least one scenario`);
  for (const s of file.scenarios) {
    assert.equal(typeof s.name, 'string', `scenario without a name: ${JSON.stringify(s)}`);
    assert.equal(typeof s.agentId, 'string', `${s.name}: agentId`);
    assert.ok(Array.isArray(s.steps) && s.steps.length > 0, `${s.name}: steps`);
    assert.ok(Array.isArray(s.expectParts), `${s.name}: expectParts`);
  }
  return file.scenarios;
}

const missing = ENV.filter((name) => !process.env[name]);
if (missing.length > 0) {
  test('ai-sdk client (driven by the Rust test real_client)', () => {
    assert.fail(
      `missing ${missing.join(', ')}. This suite is driven by the Rust test \`real_client\` ` +
        '(crates/api/tests/api/real_client.rs), which starts toolserver, writes the scenarios file and runs ' +
        '`node --test test/` here with TOOLSERVER_URL, TOOLSERVER_TOKEN and TOOLSERVER_SCENARIOS set.',
    );
  });
} else {
  const scenarios = loadScenarios(process.env.TOOLSERVER_SCENARIOS);
  for (const [major, sdk] of Object.entries(MAJORS)) {
    for (const scenario of scenarios) {
      test(`${major}: ${scenario.name}`, { timeout: 4 * REQUEST_TIMEOUT_MS }, () => runScenario(sdk, process.env, scenario));
    }
  }
}
