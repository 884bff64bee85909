// The turns bench's peer: the same turn served by the AI SDK alone. A Node
// HTTP server whose every POST runs `streamText` with the OpenAI chat
// completions provider pointed at the bench's scripted model and the echo
// tool in-process (what the bench's uploaded bundle does), at most two steps
// (the tool call, then the answer), answered as a UI message stream. No
// auth, no storage.
//
// Environment: AI_SDK_MODULES (the node_modules holding `ai-v7` and
// `@ai-sdk/openai`, clients/ai-sdk/node_modules), MODEL_BASE_URL (the
// scripted model's OpenAI base URL), MODEL_ID and PORT. Prints "ready" once
// listening on 127.0.0.1:PORT.
import http from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.AI_SDK_MODULES;
const resolve = createRequire(join(modules, 'peer.js')).resolve;
const load = (name) => import(pathToFileURL(resolve(name)).href);
const { convertToModelMessages, jsonSchema, stepCountIs, streamText, tool } = await load('ai-v7');
const { createOpenAI } = await load('@ai-sdk/openai');

const openai = createOpenAI({ baseURL: process.env.MODEL_BASE_URL, apiKey: 'bench' });
const model = openai.chat(process.env.MODEL_ID);
const tools = {
  echo: tool({
    description: 'echo',
    inputSchema: jsonSchema({ type: 'object' }),
    execute: async (input) => ({ echo: input }),
  }),
};

/** The request's body, parsed as JSON. */
async function body(request) {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const server = http.createServer(async (request, response) => {
  if (request.method !== 'POST') {
    response.writeHead(200).end('ok');
    return;
  }
  const { messages } = await body(request);
  const result = streamText({
    model,
    messages: await convertToModelMessages(messages),
    tools,
    stopWhen: stepCountIs(2),
  });
  result.pipeUIMessageStreamToResponse(response);
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ready'));
