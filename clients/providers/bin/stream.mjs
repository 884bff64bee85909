#!/usr/bin/env node
// Streams one request with a provider's official SDK and prints, as one JSON
// line, what the SDK understood of the answer:
//
//   node bin/stream.mjs <anthropic|google> <origin> <model>
//
//   {"text", "toolCalls": [{name, input}], "stopReason", "inputTokens",
//    "outputTokens", "sources": [{uri, title}]}
//
// The request says "hi" and offers one tool, echo. A failed request prints
// {"error": {status, type, message}} with exit code 0, so the caller can tell
// an error the SDK parsed from a crash. Retries are off: each request is one.

import Anthropic from '@anthropic-ai/sdk';
import { GoogleGenAI } from '@google/genai';

const [provider, origin, model] = process.argv.slice(2);

const echoSchema = {
  type: 'object',
  properties: { text: { type: 'string' } },
  required: ['text'],
};

async function anthropic() {
  const client = new Anthropic({ apiKey: 'test-key', baseURL: origin, maxRetries: 0 });
  try {
    const stream = client.messages.stream({
      model,
      max_tokens: 256,
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ name: 'echo', description: 'Echoes its text', input_schema: echoSchema }],
    });
    for await (const _event of stream) {
      // The events build the final message.
    }
    const message = await stream.finalMessage();
    const blocks = message.content;
    return {
      text: blocks.filter((block) => block.type === 'text').map((block) => block.text).join(''),
      toolCalls: blocks
        .filter((block) => block.type === 'tool_use')
        .map((block) => ({ name: block.name, input: block.input })),
      stopReason: message.stop_reason,
      inputTokens: message.usage.input_tokens,
      outputTokens: message.usage.output_tokens,
      sources: [],
    };
  } catch (err) {
    if (!(err instanceof Anthropic.APIError)) throw err;
    const body = err.error?.error ?? {};
    return { error: { status: err.status, type: body.type ?? null, message: body.message ?? err.message } };
  }
}

async function google() {
  const ai = new GoogleGenAI({
    apiKey: 'test-key',
    httpOptions: { baseUrl: origin, retryOptions: { attempts: 1 } },
  });
  try {
    const stream = await ai.models.generateContentStream({
      model,
      contents: 'hi',
      config: {
        tools: [{ functionDeclarations: [{ name: 'echo', description: 'Echoes its text', parametersJsonSchema: echoSchema }] }],
      },
    });
    const summary = { text: '', toolCalls: [], stopReason: null, inputTokens: null, outputTokens: null, sources: [] };
    for await (const chunk of stream) {
      const candidate = chunk.candidates?.[0] ?? {};
      const parts = candidate.content?.parts ?? [];
      summary.text += parts.map((part) => part.text ?? '').join('');
      for (const call of chunk.functionCalls ?? []) {
        summary.toolCalls.push({ name: call.name, input: call.args });
      }
      summary.stopReason = candidate.finishReason ?? summary.stopReason;
      for (const source of candidate.groundingMetadata?.groundingChunks ?? []) {
        summary.sources.push({ uri: source.web?.uri, title: source.web?.title });
      }
      if (chunk.usageMetadata) {
        summary.inputTokens = chunk.usageMetadata.promptTokenCount;
        summary.outputTokens = chunk.usageMetadata.candidatesTokenCount;
      }
    }
    return summary;
  } catch (err) {
    if (err?.name !== 'ApiError') throw err;
    let body = {};
    try {
      body = JSON.parse(err.message).error ?? {};
    } catch {
      // Not a JSON error body: the message is the whole story.
    }
    return { error: { status: err.status, type: body.status ?? null, message: body.message ?? err.message } };
  }
}

const providers = { anthropic, google };
if (!providers[provider] || !origin || !model) {
  console.error('usage: node bin/stream.mjs <anthropic|google> <origin> <model>');
  process.exit(2);
}
console.log(JSON.stringify(await providers[provider]()));
