// The AI SDK's useChat, unmodified, in headless Chromium (Debian's
// chromium, driven by playwright-core), on a page served from another origin
// than the API:
// - a turn with a tool call, over HTTP, through CORS;
// - the page reloads mid-turn and `useChat({ resume: true })` shows the
//   complete assistant message;
// - a page attached through `WebSocketChatTransport` sees a detached turn's
//   result arrive, and makes no HTTP request to the API meanwhile;
// - a second tab stops the turn of the first (the Rust driver then checks
//   that the runner call ended);
// - a turn asks for approval and its page is closed; the approval is given
//   with curl (`POST /approvals/{id}`); the turn completes on the server,
//   a page following the conversation over WebSocketChatTransport sees it
//   live, and a page opened afterwards shows the result.
//
// Driven by the Rust test `browser` with the scenarios file's `browser`
// section: `{ pagePort, turn, reload, detached, stop, approval }`, each naming an
// agent and what its turn should show.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { chromium } from 'playwright-core';

const ENV = ['TOOLSERVER_URL', 'TOOLSERVER_TOKEN', 'TOOLSERVER_SCENARIOS'];
const missing = ENV.filter((name) => !process.env[name]);
const WAIT_MS = 30_000;

const server = process.env.TOOLSERVER_URL;
const token = process.env.TOOLSERVER_TOKEN;
let scenarios;
let pages;
let browser;
let origin;

// Serves the page and its bundle on the page port: another origin than the API.
function servePage(port) {
  const files = {
    '/': ['text/html', readFileSync(new URL('../page/index.html', import.meta.url))],
    '/app.js': ['text/javascript', readFileSync(new URL('../dist/app.js', import.meta.url))],
  };
  const http = createServer((request, response) => {
    const file = files[new URL(request.url, 'http://page').pathname];
    if (!file) {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { 'content-type': file[0] }).end(file[1]);
  });
  return new Promise((resolve) => http.listen(port, '127.0.0.1', () => resolve(http)));
}

function pageUrl({ agentId, chat, transport = 'http', resume = false, load = false }) {
  const query = new URLSearchParams({
    server, token, agent: agentId, chat, transport, resume: resume ? '1' : '0', load: load ? '1' : '0',
  });
  return `${origin}/?${query}`;
}

// What the page shows: the chat's status, error and messages.
async function shown(page) {
  const [status, error, messages] = await Promise.all([
    page.textContent('#status'),
    page.textContent('#error'),
    page.textContent('#messages'),
  ]);
  return { status, error, messages: JSON.parse(messages || '[]') };
}

// Reads the page until `done` holds of what it shows (at most WAIT_MS).
async function until(page, what, done) {
  const deadline = Date.now() + WAIT_MS;
  let last;
  while (Date.now() < deadline) {
    last = await shown(page);
    if (done(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.fail(`the page never showed ${what}: ${JSON.stringify(last)}`);
}

function assistant(view) {
  return view.messages.filter((message) => message.role === 'assistant').at(-1);
}

function textOf(message) {
  return (message?.parts ?? []).filter((part) => part.type === 'text').map((part) => part.text).join('');
}

function toolPart(message) {
  return (message?.parts ?? []).find((part) => part.type.startsWith('tool-') || part.type === 'dynamic-tool');
}

async function send(page, text) {
  await page.fill('#input', text);
  await page.click('#send');
}

async function openPage(options) {
  const page = await browser.newPage();
  page.on('pageerror', (error) => console.error(`page error: ${error.message}`));
  await page.goto(pageUrl(options));
  await page.waitForSelector('#status');
  return page;
}

if (missing.length > 0) {
  test('browser (driven by the Rust test browser)', () => {
    assert.fail(`missing ${missing.join(', ')}; run the Rust test \`browser\` (crates/api/tests/api/browser.rs)`);
  });
} else {
  ({ browser: scenarios } = JSON.parse(readFileSync(process.env.TOOLSERVER_SCENARIOS, 'utf8')));
  origin = `http://127.0.0.1:${scenarios.pagePort}`;

  before(async () => {
    await import('../build.mjs');
    pages = await servePage(scenarios.pagePort);
    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--headless', '--disable-background-networking'],
    });
  });

  after(async () => {
    await browser?.close();
    pages?.close();
  });

  test('a page on another origin runs a turn with a tool call', { timeout: 60_000 }, async () => {
    const { agentId, expectText, expectOutput } = scenarios.turn;
    const page = await openPage({ agentId, chat: `browser-${randomUUID()}` });
    await send(page, 'go');
    const view = await until(page, 'the finished turn', (v) => v.status === 'ready' && textOf(assistant(v)) === expectText);
    assert.equal(view.error, '');
    const tool = toolPart(assistant(view));
    assert.equal(tool?.state, 'output-available', JSON.stringify(assistant(view)));
    assert.deepEqual(tool.output, expectOutput);
    await page.close();
  });

  test('a page reloaded mid-turn shows the complete message with useChat({ resume: true })', { timeout: 60_000 }, async () => {
    const { agentId, expectText, expectOutput } = scenarios.reload;
    const page = await openPage({ agentId, chat: `browser-reload-${randomUUID()}`, resume: true });
    await send(page, 'go');
    const before = await until(page, 'the tool call', (v) => toolPart(assistant(v))?.state === 'input-available');
    await page.reload();
    const view = await until(page, 'the resumed turn', (v) => v.status === 'ready' && textOf(assistant(v)) === expectText);
    assert.equal(assistant(view).id, assistant(before).id, 'the resume rebuilds the same message');
    const tool = toolPart(assistant(view));
    assert.equal(tool?.state, 'output-available', JSON.stringify(assistant(view)));
    assert.deepEqual(tool.output, expectOutput);
    await page.close();
  });

  test('a page attached through WebSocketChatTransport sees a detached result arrive without polling', { timeout: 60_000 }, async () => {
    const { agentId, expectText } = scenarios.detached;
    const chat = `browser-detached-${randomUUID()}`;
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    const started = await fetch(`${server}/agents/${agentId}/async`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        id: chat,
        trigger: 'submit-message',
        messages: [{ id: randomUUID(), role: 'user', parts: [{ type: 'text', text: 'run it' }] }],
      }),
    });
    assert.equal(started.status, 202);
    const { statusId } = await started.json();
    const waiting = Date.now() + WAIT_MS;
    for (;;) {
      const status = await (await fetch(`${server}/async/${statusId}`, { headers })).json();
      if (status.status === 'waiting') break;
      assert.ok(Date.now() < waiting, `the detached turn never waited: ${JSON.stringify(status)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }

    const page = await browser.newPage();
    const toApi = [];
    page.on('request', (request) => {
      if (request.url().startsWith(server)) toApi.push(request.url());
    });
    const sockets = [];
    page.on('websocket', (socket) => sockets.push(socket.url()));
    await page.goto(pageUrl({ agentId, chat, transport: 'ws', resume: true }));
    const view = await until(page, 'the detached result', (v) => textOf(assistant(v)).endsWith(expectText) && v.status === 'ready');
    assert.equal(view.error, '');
    assert.deepEqual(toApi, [], 'the page made no HTTP request to the API');
    assert.equal(sockets.length, 1, JSON.stringify(sockets));
    await page.close();
  });

  test('stop from a second tab ends the turn of the first', { timeout: 60_000 }, async () => {
    const { agentId } = scenarios.stop;
    const chat = `browser-stop-${randomUUID()}`;
    const first = await openPage({ agentId, chat });
    await send(first, 'hang');
    await until(first, 'the tool call', (v) => toolPart(assistant(v))?.state === 'input-available');
    const second = await openPage({ agentId, chat });
    await second.click('#stop');
    await second.waitForFunction(() => document.querySelector('#stopped').textContent === '202');
    const view = await until(first, 'the end of the stopped turn', (v) => v.status === 'ready' || v.status === 'error');
    assert.notEqual(toolPart(assistant(view))?.state, 'output-available', JSON.stringify(assistant(view)));
    await first.close();
    await second.close();
  });

  test('an approval given with curl after the page closed completes the turn on the server', { timeout: 90_000 }, async () => {
    const { agentId, expectText, expectOutput } = scenarios.approval;
    const chat = `browser-approval-${randomUUID()}`;
    const asking = await openPage({ agentId, chat });
    await send(asking, 'clean up');
    const asked = await until(asking, 'the approval request', (v) => v.status === 'ready' && toolPart(assistant(v))?.state === 'approval-requested');
    const approvalId = toolPart(assistant(asked)).approval.id;
    await asking.close();

    const follower = await browser.newPage();
    follower.on('pageerror', (error) => console.error(`page error: ${error.message}`));
    const frames = [];
    follower.on('websocket', (socket) => socket.on('framereceived', (frame) => frames.push(String(frame.payload))));
    await follower.goto(pageUrl({ agentId, chat, transport: 'ws', resume: true, load: true }));
    await until(follower, 'the stored request', (v) => toolPart(assistant(v))?.state === 'approval-requested');
    const waiting = Date.now() + WAIT_MS;
    while (frames.length === 0 && Date.now() < waiting) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await new Promise((resolve) => setTimeout(resolve, 300));

    const answer = execFileSync('curl', [
      '-sS', '-X', 'POST', `${server}/approvals/${approvalId}`,
      '-H', `authorization: Bearer ${token}`, '-H', 'content-type: application/json',
      '-d', JSON.stringify({ approved: true, reason: 'approved from the terminal' }),
      '-w', '\n%{http_code}',
    ], { encoding: 'utf8' });
    const [body, code] = answer.trimEnd().split('\n');
    assert.equal(code, '200', body);
    assert.equal(JSON.parse(body).approval.status, 'approved');

    const live = await until(follower, 'the resumed turn, live', (v) => v.status === 'ready' && textOf(assistant(v)) === expectText);
    assert.equal(live.error, '');
    assert.equal(toolPart(assistant(live))?.state, 'output-available', JSON.stringify(assistant(live)));
    assert.deepEqual(toolPart(assistant(live)).output, expectOutput);
    assert.equal(assistant(live).id, assistant(asked).id, 'the turn read on in the same message');
    await follower.close();

    const later = await openPage({ agentId, chat, resume: true, load: true });
    const view = await until(later, 'the result', (v) => v.status === 'ready' && textOf(assistant(v)) === expectText);
    assert.equal(view.error, '');
    assert.deepEqual(toolPart(assistant(view)).output, expectOutput);
    await later.close();
  });
}
