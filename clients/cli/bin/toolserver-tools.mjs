#!/usr/bin/env node
// toolserver-tools: bundle a tool's entry with esbuild and push it to a
// toolserver; list and remove tools. The server and token come from
// --url/--token or TOOLSERVER_URL/TOOLSERVER_TOKEN.

import { parseArgs } from 'node:util';

import { UsageError } from '../lib/bundle.mjs';
import { Api, DEFAULT_MAX_BYTES, list, push, remove } from '../lib/commands.mjs';

const USAGE = `usage:
  toolserver-tools push <entry.ts|entry.js> [--name N] [--description D] [--schema file.json] [--config file.json] [--max-bytes B]
  toolserver-tools list
  toolserver-tools rm <name|toolId>
options for every command:
  --url U     the server (default: $TOOLSERVER_URL)
  --token T   a bearer token of the account (default: $TOOLSERVER_TOKEN)
  --quiet     print only the result`;

const OPTIONS = {
  url: { type: 'string' },
  token: { type: 'string' },
  name: { type: 'string' },
  description: { type: 'string' },
  schema: { type: 'string' },
  config: { type: 'string' },
  'max-bytes': { type: 'string' },
  quiet: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
};

function settings(values) {
  const url = values.url ?? process.env.TOOLSERVER_URL;
  const token = values.token ?? process.env.TOOLSERVER_TOKEN;
  if (!url) throw new UsageError('no server: give --url or set TOOLSERVER_URL');
  if (!token) throw new UsageError('no token: give --token or set TOOLSERVER_TOKEN');
  return new Api(url, token);
}

function maxBytes(value) {
  if (value === undefined) return DEFAULT_MAX_BYTES;
  const bytes = Number(value);
  if (!Number.isInteger(bytes) || bytes < 1) {
    throw new UsageError(`--max-bytes takes a positive whole number, not ${value}`);
  }
  return bytes;
}

async function main(argv) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true });
  } catch (err) {
    throw new UsageError(`${err.message}\n${USAGE}`);
  }
  const { values, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (values.help || !command) {
    console.log(USAGE);
    return values.help ? 0 : 2;
  }
  const say = values.quiet ? () => {} : (line) => console.error(line);
  if (command === 'push' && rest.length === 1) {
    const api = settings(values);
    const { tool, created } = await push(
      api,
      rest[0],
      {
        name: values.name,
        description: values.description,
        schema: values.schema,
        config: values.config,
        maxBytes: maxBytes(values['max-bytes']),
      },
      say,
    );
    say(`${created ? 'created' : 'updated'} ${tool.name}, version ${tool.version}`);
    console.log(tool.toolId);
    return 0;
  }
  if (command === 'list' && rest.length === 0) {
    for (const line of await list(settings(values))) console.log(line);
    return 0;
  }
  if (command === 'rm' && rest.length === 1) {
    const id = await remove(settings(values), rest[0]);
    say(`removed ${rest[0]}`);
    console.log(id);
    return 0;
  }
  throw new UsageError(USAGE);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    if (err instanceof UsageError) {
      console.error(`toolserver-tools: ${err.message}`);
      process.exitCode = 2;
    } else {
      console.error(err);
      process.exitCode = 1;
    }
  },
);
