// Bundles a tool's entry (TypeScript or JavaScript, with its npm imports)
// into one self-contained ESM module for Node, the form toolserver runs.

import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import * as esbuild from 'esbuild';

/** A bundled tool: its bytes and their sha256 (hex). */
export class Bundled {
  constructor(bytes) {
    this.bytes = bytes;
    this.sha256 = createHash('sha256').update(bytes).digest('hex');
  }
}

/** An error a person can act on, printed without a stack. */
export class UsageError extends Error {}

/**
 * Bundles `entry`, refusing a source or an output larger than `maxBytes`
 * and an entry without a default export.
 */
export async function bundle(entry, maxBytes) {
  const source = await stat(entry).catch(() => null);
  if (!source?.isFile()) {
    throw new UsageError(`no such file: ${entry}`);
  }
  if (source.size > maxBytes) {
    throw new UsageError(`${entry} is ${source.size} bytes; the bundle limit is ${maxBytes}`);
  }
  let result;
  try {
    result = await esbuild.build({
      entryPoints: [entry],
      bundle: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      write: false,
      metafile: true,
      logLevel: 'silent',
      legalComments: 'none',
      outfile: path.join(path.dirname(entry), 'tool.mjs'),
      // A CommonJS dependency that requires Node built-ins needs `require`
      // inside an ES module.
      banner: {
        js: "import { createRequire as __toolserverRequire } from 'node:module'; const require = __toolserverRequire(import.meta.url.startsWith('file:') ? import.meta.url : 'file:///');",
      },
    });
  } catch (err) {
    const messages = (err.errors ?? []).map(
      (e) => `${e.location ? `${e.location.file}:${e.location.line}: ` : ''}${e.text}`,
    );
    throw new UsageError(`bundling ${entry} failed:\n  ${messages.join('\n  ') || err.message}`);
  }
  const [output] = result.outputFiles;
  const exports = Object.values(result.metafile.outputs)[0]?.exports ?? [];
  if (!exports.includes('default')) {
    throw new UsageError(`${entry} has no default export; export default { execute(ctx, input) { … } }`);
  }
  if (output.contents.length > maxBytes) {
    throw new UsageError(
      `the bundle of ${entry} is ${output.contents.length} bytes; the limit is ${maxBytes}`,
    );
  }
  return new Bundled(Buffer.from(output.contents));
}
