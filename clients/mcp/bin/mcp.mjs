#!/usr/bin/env node
// Talks to a toolserver's /mcp with the official MCP TypeScript SDK client
// (Client + StreamableHTTPClientTransport) and prints what it saw as JSON.
//
//   MCP_URL=http://host/mcp MCP_TOKEN=<jwt> node bin/mcp.mjs <command> [args]
//
//   list                      every tool, following nextCursor
//   call <tool> <json>        a call; prints {progress: [...], result, order}
//   task <tool> <json>        a task-augmented call (the tasks extension)
//   get <taskId>              tasks/get
//   wait <taskId>             tasks/get every pollIntervalMs until the task ends
//   cancel <taskId>           tasks/cancel, then tasks/get
//   discover                  the SDK's OAuth protected-resource discovery
//
// Errors print as {"error": {code, message}} with exit code 0, so the caller
// can tell a protocol error from a crash.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { discoverOAuthProtectedResourceMetadata } from '@modelcontextprotocol/sdk/client/auth.js';
import { z } from 'zod';

const TASKS = 'io.modelcontextprotocol/tasks';
const takesTasks = { 'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } } };
const anyResult = z.object({}).passthrough();

const url = new URL(process.env.MCP_URL);
const token = process.env.MCP_TOKEN;

async function connect() {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  const client = new Client({ name: 'toolserver-tests', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function getTask(client, taskId) {
  return client.request({ method: 'tasks/get', params: { taskId, _meta: takesTasks } }, anyResult);
}

const commands = {
  async list(client) {
    const tools = [];
    let cursor;
    let pages = 0;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      tools.push(...page.tools);
      cursor = page.nextCursor;
      pages += 1;
    } while (cursor);
    return { tools, pages, protocolVersion: client.transport.protocolVersion ?? null };
  },

  async call(client, name, args) {
    const order = [];
    const progress = [];
    const result = await client.callTool({ name, arguments: JSON.parse(args ?? '{}') }, undefined, {
      onprogress: (update) => {
        progress.push(update);
        order.push('progress');
      },
      timeout: 120_000,
    });
    order.push('result');
    return { progress, result, order };
  },

  async task(client, name, args) {
    return client.request(
      { method: 'tools/call', params: { name, arguments: JSON.parse(args ?? '{}'), _meta: takesTasks } },
      anyResult,
    );
  },

  async get(client, taskId) {
    return getTask(client, taskId);
  },

  async wait(client, taskId) {
    const seen = [];
    for (;;) {
      const task = await getTask(client, taskId);
      seen.push(task.status);
      if (['completed', 'failed', 'cancelled'].includes(task.status)) return { task, seen };
      await sleep(task.pollIntervalMs ?? 500);
    }
  },

  async cancel(client, taskId) {
    const ack = await client.request(
      { method: 'tasks/cancel', params: { taskId, _meta: takesTasks } },
      anyResult,
    );
    return { ack, task: await getTask(client, taskId) };
  },
};

async function main() {
  const [command, ...args] = process.argv.slice(2);
  if (command === 'discover') {
    const metadata = await discoverOAuthProtectedResourceMetadata(url);
    return { metadata };
  }
  const run = commands[command];
  if (!run) throw new Error(`unknown command ${command}`);
  const client = await connect();
  try {
    return await run(client, ...args);
  } finally {
    await client.close();
  }
}

main().then(
  (output) => process.stdout.write(`${JSON.stringify(output)}\n`),
  (error) => {
    process.stdout.write(`${JSON.stringify({ error: { code: error.code ?? null, message: String(error.message ?? error) } })}\n`);
  },
);
