// Stored conversations as the AI SDK reads them: for each pinned major of
// the published `ai` package (6.x as `ai-v6`, 7.x as `ai-v7`) and each
// stored conversation, `safeValidateUIMessages` must accept the messages,
// and must not have dropped anything on the way: its schemas are loose
// objects that strip a field they do not define for a part's state (a
// `preliminary` on an `output-error` part, say), so a stripped field is
// reported as an error too.
//
// Driven by the Rust test `stored_shapes` (crates/api/tests/api/stored_shapes.rs),
// which produces every kind of stored conversation through the running
// server and writes them to the file named by TOOLSERVER_STORED:
// `{ "conversations": [{ "name", "messages" }] }`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as v6 from 'ai-v6';
import * as v7 from 'ai-v7';

const MAJORS = { v6, v7 };
const ENV = 'TOOLSERVER_STORED';

/**
 * The issues of a failed validation, one a line, each with its path. 6.x
 * validates a part against a union of every part schema; of a union's
 * failed branches only those of the part's own type and state are shown.
 */
function issuesOf(error) {
  const issues = error?.cause?.issues ?? error?.issues;
  if (!Array.isArray(issues) || issues.length === 0) return `  ${error?.message ?? error}`;
  return flatten(issues, []).map(({ path, message }) => `  ${formatPath(path)}: ${message}`).join('\n');
}

function flatten(issues, base) {
  return issues.flatMap((issue) => {
    const path = [...base, ...(issue.path ?? [])];
    if (issue.code !== 'invalid_union' || !Array.isArray(issue.errors)) return [{ path, message: issue.message }];
    const discriminant = (i) => i.path?.length === 1 && (i.path[0] === 'type' || i.path[0] === 'state');
    const own = issue.errors.filter((branch) => !branch.some(discriminant));
    return own.length > 0 ? own.flatMap((branch) => flatten(branch, path)) : [{ path, message: 'no part schema has this type and state' }];
  });
}

function formatPath([message, ...rest]) {
  return `messages[${message}]${rest.map((p) => (typeof p === 'number' ? `[${p}]` : `.${p}`)).join('')}`;
}

/** Paths present in `sent` that the validated copy lacks (fields the schema stripped). */
function strippedFields(sent, validated, path = 'messages') {
  if (sent === null || typeof sent !== 'object') return [];
  if (validated === null || typeof validated !== 'object') return [];
  const stripped = [];
  for (const [key, value] of Object.entries(sent)) {
    const at = Array.isArray(sent) ? `${path}[${key}]` : `${path}.${key}`;
    if (!Object.prototype.hasOwnProperty.call(validated, key)) stripped.push(at);
    else stripped.push(...strippedFields(value, validated[key], at));
  }
  return stripped;
}

async function checkStored(sdk, { name, messages }) {
  const result = await sdk.safeValidateUIMessages({ messages });
  if (!result.success) {
    assert.fail(`the stored conversation "${name}" is not valid UIMessage[]:\n${issuesOf(result.error)}\nmessages:\n${JSON.stringify(messages, null, 2)}`);
  }
  const stripped = strippedFields(messages, result.data);
  assert.deepEqual(stripped, [], `the stored conversation "${name}" carries fields its parts' states do not define:\n${JSON.stringify(messages, null, 2)}`);
}

function loadConversations(path) {
  const file = JSON.parse(readFileSync(path, 'utf8'));
  assert.ok(Array.isArray(file?.conversations) && file.conversations.length > 0, `${path}: { "conversations": [...] } with at least one conversation`);
  for (const conversation of file.conversations) {
    assert.equal(typeof conversation.name, 'string', `a conversation without a name: ${JSON.stringify(conversation)}`);
    assert.ok(Array.isArray(conversation.messages), `${conversation.name}: messages`);
  }
  return file.conversations;
}

if (!process.env[ENV]) {
  test('stored conversations (driven by the Rust test stored_shapes)', () => {
    assert.fail(`missing ${ENV}; run the Rust test \`stored_shapes\` (crates/api/tests/api/stored_shapes.rs)`);
  });
} else {
  const conversations = loadConversations(process.env[ENV]);
  for (const [major, sdk] of Object.entries(MAJORS)) {
    for (const conversation of conversations) {
      test(`${major}: stored ${conversation.name}`, () => checkStored(sdk, conversation));
    }
  }
}
