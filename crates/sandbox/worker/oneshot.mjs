// One-shot runner: `node oneshot.mjs` reads one invoke request (JSON) from
// stdin, runs it, writes NDJSON frames to stdout and exits 0. A streaming
// result is drained and only its last value is reported, as a `final` frame.
// A malformed request is reported as an error frame named `BadRequest`.

import { grantEgress } from './egress.mjs';
import { text } from 'node:stream/consumers';
import { BundleCache, Call, RequestError, captureConsole, parseInvokeRequest, resolveCacheRoot } from './runtime.mjs';

captureConsole();
const write = (line) => process.stdout.write(line);

try {
  const request = parseInvokeRequest(await text(process.stdin));
  grantEgress(request.egressToken);
  await new Call(request, { write, drain: true }).start(new BundleCache(resolveCacheRoot()));
} catch (err) {
  if (!(err instanceof RequestError)) throw err;
  write(`${JSON.stringify({ t: 'error', name: 'BadRequest', message: err.message })}\n`);
}

// The tool may have left timers or sockets behind; exit once stdout is flushed.
process.stdout.write('', () => process.exit(0));
