// The CLI's commands: push (bundle, then create or update by name), list
// and rm.

import { readFile } from 'node:fs/promises';
import path from 'node:path';

import { Api } from './api.mjs';
import { bundle, UsageError } from './bundle.mjs';

/** The server's default bundle limit (`TOOLSERVER_MAX_BUNDLE_BYTES`). */
export const DEFAULT_MAX_BYTES = 1024 * 1024;

async function readJson(file, what) {
  let text;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read the ${what} file ${file}: ${err.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UsageError(`the ${what} file ${file} is not JSON: ${err.message}`);
  }
}

/** The tool's name: `--name`, else the entry's file name without extension. */
function toolName(entry, name) {
  return name ?? path.basename(entry).replace(/\.[^.]+$/, '');
}

/**
 * Bundles `entry` and creates the tool named `options.name` (default: the
 * file name) or, when the account has one by that name, updates it.
 * Returns the tool as the server answered, and whether it was created.
 */
export async function push(api, entry, options, say) {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  const name = toolName(entry, options.name);
  say(`bundling ${entry}`);
  const bundled = await bundle(entry, maxBytes);
  say(`bundled ${bundled.bytes.length} bytes, sha256 ${bundled.sha256}`);
  const changes = { bundle: bundled.bytes.toString('base64') };
  if (options.description !== undefined) changes.description = options.description;
  if (options.schema !== undefined) changes.inputSchema = await readJson(options.schema, 'schema');
  if (options.config !== undefined) changes.defaultConfig = await readJson(options.config, 'config');
  const existing = (await api.listTools()).find((tool) => tool.name === name);
  let tool;
  if (existing) {
    say(`updating ${name} (${existing.toolId})`);
    tool = await api.updateTool(existing.toolId, changes);
  } else {
    if (changes.description === undefined || changes.inputSchema === undefined) {
      throw new UsageError(`${name} is a new tool: give --description and --schema <file.json>`);
    }
    say(`creating ${name}`);
    tool = await api.createTool({ name, ...changes });
  }
  if (tool.bundleSha256 !== bundled.sha256) {
    throw new UsageError(
      `the server stored sha256 ${tool.bundleSha256}, not the bundle's ${bundled.sha256}`,
    );
  }
  return { tool, created: !existing };
}

/** The account's tools, one line each. */
export async function list(api) {
  return (await api.listTools()).map(
    (tool) => `${tool.toolId}\t${tool.name}\tv${tool.version}\t${tool.bundleSha256}`,
  );
}

/** Deletes the tool named or identified by `nameOrId`; returns its id. */
export async function remove(api, nameOrId) {
  const tools = await api.listTools();
  const tool = tools.find((t) => t.toolId === nameOrId) ?? tools.find((t) => t.name === nameOrId);
  if (!tool) {
    throw new UsageError(`no tool named or with id ${nameOrId}`);
  }
  await api.deleteTool(tool.toolId);
  return tool.toolId;
}

export { Api };
