// Shared runtime for the resident worker (worker.mjs) and the one-shot runner
// (oneshot.mjs): request validation, the on-disk/in-memory bundle cache, and
// running one tool call while emitting NDJSON frames.

import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { format, inspect } from 'node:util';
import { serverFetch } from './fetch.mjs';

const SHA256_HEX = /^[0-9a-f]{64}$/;
// A W3C trace context: the caller's trace, for a tool's own outbound requests.
const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
// setTimeout silently turns larger delays into 1 ms.
const MAX_DEADLINE_MS = 2 ** 31 - 1;
const CONSOLE_LEVELS = ['log', 'info', 'warn', 'error', 'debug'];

/** An error whose `name` is one of the protocol's platform error names. */
class PlatformError extends Error {
  constructor(name, message) {
    super(message);
    this.name = name;
  }
}

/** A request the worker rejects before running anything (HTTP 400 unless `status` says otherwise). */
export class RequestError extends Error {
  constructor(message, status = 400) {
    super(message);
    this.status = status;
  }
}

/** The positive integer in environment variable `name`, or `fallback` when unset; throws when malformed. */
export function positiveIntFromEnv(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  }
  return value;
}

const DEFAULT_MAX_OUTPUT_BYTES = positiveIntFromEnv('TOOLSERVER_MAX_OUTPUT_BYTES', 4 * 1024 * 1024);

const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);
const isPositiveInt = (value) => Number.isSafeInteger(value) && value > 0;
const isNonEmptyString = (value) => typeof value === 'string' && value !== '';

/** Parses and validates an invoke request body; throws RequestError. */
export function parseInvokeRequest(text) {
  let body;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw new RequestError(`invalid JSON: ${err.message}`);
  }
  if (!isObject(body)) throw new RequestError('request body must be a JSON object');

  const { callId, idempotencyKey, config = {}, bundle, deadlineMs } = body;
  const maxOutputBytes = body.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  if (!isNonEmptyString(callId)) throw new RequestError('callId must be a non-empty string');
  if (typeof idempotencyKey !== 'string') throw new RequestError('idempotencyKey must be a string');
  if (!isObject(config)) throw new RequestError('config must be an object');
  if (!isPositiveInt(deadlineMs) || deadlineMs > MAX_DEADLINE_MS) {
    throw new RequestError(`deadlineMs must be an integer between 1 and ${MAX_DEADLINE_MS}`);
  }
  if (!isPositiveInt(maxOutputBytes)) throw new RequestError('maxOutputBytes must be a positive integer');
  if (body.async != null && !isObject(body.async)) throw new RequestError('async must be an object or null');
  for (const field of ['completeUrl', 'heartbeatUrl']) {
    if (body.async?.[field] === undefined) continue;
    if (!isHttpUrl(body.async[field])) throw new RequestError(`async.${field} must be an http(s) URL`);
    if (!isNonEmptyString(body.async.completionToken)) {
      throw new RequestError(`async.completionToken must be a non-empty string with async.${field}`);
    }
  }
  for (const field of ['livenessIntervalMs', 'completionRetryMs']) {
    const value = body.async?.[field];
    if (value !== undefined && (!isPositiveInt(value) || value > MAX_DEADLINE_MS)) {
      throw new RequestError(`async.${field} must be an integer between 1 and ${MAX_DEADLINE_MS}`);
    }
  }
  const inlineMs = body.async?.inlineMs;
  if (inlineMs !== undefined && (!isPositiveInt(inlineMs) || inlineMs > MAX_DEADLINE_MS)) {
    throw new RequestError(`async.inlineMs must be an integer between 1 and ${MAX_DEADLINE_MS}`);
  }

  if (body.egressToken !== undefined && !isNonEmptyString(body.egressToken)) {
    throw new RequestError('egressToken must be a non-empty string');
  }
  if (body.fetch !== undefined && (!isObject(body.fetch) || !isHttpUrl(body.fetch.url) || !isNonEmptyString(body.fetch.grant))) {
    throw new RequestError('fetch must be {url: an http(s) URL, grant: a non-empty string}');
  }
  if (body.traceparent !== undefined && !TRACEPARENT.test(body.traceparent)) {
    throw new RequestError('traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)');
  }

  if (!isObject(bundle)) throw new RequestError('bundle must be an object');
  // The hash becomes a cache directory name, so it must be exactly 64 lowercase hex digits.
  if (typeof bundle.sha256 !== 'string' || !SHA256_HEX.test(bundle.sha256)) {
    throw new RequestError('bundle.sha256 must be 64 lowercase hex digits');
  }
  if ((bundle.inline === undefined) === (bundle.url === undefined)) {
    throw new RequestError('bundle must have exactly one of inline or url');
  }
  if (bundle.inline !== undefined && typeof bundle.inline !== 'string') {
    throw new RequestError('bundle.inline must be a base64 string');
  }
  if (bundle.url !== undefined && !isHttpUrl(bundle.url)) {
    throw new RequestError('bundle.url must be an http(s) URL');
  }

  return {
    callId,
    idempotencyKey,
    input: body.input,
    config,
    bundle: { sha256: bundle.sha256, inline: bundle.inline, url: bundle.url },
    deadlineMs,
    maxOutputBytes,
    async: body.async ?? null,
    egressToken: body.egressToken,
    traceparent: body.traceparent,
    fetch: body.fetch,
  };
}

function isHttpUrl(value) {
  if (typeof value !== 'string') return false;
  try {
    const { protocol } = new URL(value);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}

/**
 * Picks the first writable cache root: `TOOLSERVER_CACHE_ROOTS` (`:`-separated)
 * when set, else /cache/tools, $HOME/.cache/tools, /tmp/cache/tools.
 */
export function resolveCacheRoot(env = process.env) {
  const candidates = env.TOOLSERVER_CACHE_ROOTS
    ? env.TOOLSERVER_CACHE_ROOTS.split(':').filter(Boolean)
    : ['/cache/tools', env.HOME && join(env.HOME, '.cache/tools'), '/tmp/cache/tools'].filter(Boolean);
  for (const root of candidates) {
    try {
      mkdirSync(root, { recursive: true });
      const probe = join(root, `.probe-${process.pid}`);
      writeFileSync(probe, '');
      rmSync(probe);
      return root;
    } catch {
      // Not writable; try the next candidate.
    }
  }
  throw new Error(`no writable cache root among: ${candidates.join(', ')}`);
}

const sha256Hex = (bytes) => createHash('sha256').update(bytes).digest('hex');

// Signed URLs carry credentials in the query string; keep them out of messages.
function redactUrl(url) {
  const { origin, pathname } = new URL(url);
  return origin + pathname;
}

/**
 * Bundles stored as `<root>/<sha256>/bundle.mjs`, plus the modules imported
 * from them, keyed by hash. Counters cover the cache's lifetime.
 */
export class BundleCache {
  #root;
  // sha256 -> Promise<tool>; a shared promise makes concurrent first calls share one load.
  #tools = new Map();
  stats = { modulesLoaded: 0, downloads: 0, cacheHits: 0 };

  constructor(root) {
    this.#root = root;
  }

  /**
   * Resolves to the bundle's default export (an object with `execute`).
   * A download started here is bounded by `downloadTimeoutMs`.
   */
  load(bundle, downloadTimeoutMs) {
    const cached = this.#tools.get(bundle.sha256);
    if (cached) {
      this.stats.cacheHits++;
      return cached;
    }
    const pending = this.#loadUncached(bundle, downloadTimeoutMs);
    this.#tools.set(bundle.sha256, pending);
    // Forget failed loads so a later call can retry.
    pending.catch(() => {
      if (this.#tools.get(bundle.sha256) === pending) this.#tools.delete(bundle.sha256);
    });
    return pending;
  }

  async #loadUncached({ sha256, inline, url }, downloadTimeoutMs) {
    const file = join(this.#root, sha256, 'bundle.mjs');
    if (await this.#isVerifiedOnDisk(file, sha256)) {
      this.stats.cacheHits++;
    } else {
      const bytes = inline !== undefined ? Buffer.from(inline, 'base64') : await this.#download(url, downloadTimeoutMs);
      const actual = sha256Hex(bytes);
      if (actual !== sha256) {
        throw new PlatformError('BundleIntegrityError', `bundle sha256 is ${actual}, expected ${sha256}`);
      }
      await writeAtomically(file, bytes);
    }
    return this.#import(file);
  }

  // A cached file whose bytes no longer match its hash is deleted and treated as a miss.
  async #isVerifiedOnDisk(file, sha256) {
    let bytes;
    try {
      bytes = await readFile(file);
    } catch (err) {
      if (err.code === 'ENOENT') return false;
      throw err;
    }
    if (sha256Hex(bytes) === sha256) return true;
    await rm(file, { force: true });
    return false;
  }

  async #download(url, timeoutMs) {
    this.stats.downloads++;
    try {
      const response = await fetch(url, { redirect: 'error', signal: AbortSignal.timeout(timeoutMs) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      return Buffer.from(await response.arrayBuffer());
    } catch (err) {
      const reason = err.cause?.message ?? err.message;
      throw new PlatformError('BundleFetchError', `downloading ${redactUrl(url)} failed: ${reason}`);
    }
  }

  async #import(file) {
    let module;
    try {
      module = await import(pathToFileURL(file).href);
    } catch (err) {
      throw new PlatformError('BundleLoadError', `importing bundle failed: ${err?.message ?? err}`);
    }
    const tool = module.default;
    if (typeof tool?.execute !== 'function') {
      throw new PlatformError('BundleLoadError', 'bundle default export has no execute function');
    }
    this.stats.modulesLoaded++;
    return tool;
  }
}

async function writeAtomically(file, bytes) {
  const temp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(temp, bytes);
    await rename(temp, file);
  } catch (err) {
    await rm(temp, { force: true });
    throw new PlatformError('BundleLoadError', `caching bundle failed: ${err.message}`);
  }
}

// The call whose code is currently running, for routing console output.
const currentCall = new AsyncLocalStorage();
let consoleCaptured = false;

// Emits a log frame for `call`; output that belongs to no live call goes to
// stderr (never stdout, which may carry frames).
function logTo(call, level, args) {
  if (!call?.log(level, args)) process.stderr.write(`${format(...args)}\n`);
}

/**
 * Replaces the console's output methods, once per process, with versions that
 * log to the call whose code is running.
 */
export function captureConsole() {
  if (consoleCaptured) return;
  consoleCaptured = true;
  for (const level of CONSOLE_LEVELS) console[level] = (...args) => logTo(currentCall.getStore(), level, args);
  // console.dir writes to stdout directly rather than through console.log.
  console.dir = (value, options) => logTo(currentCall.getStore(), 'log', [inspect(value, options)]);
}

const frameLine = (frame) => `${JSON.stringify(frame)}\n`;

/**
 * One tool call. `start()` runs it and resolves once the single terminal frame
 * (`end`, `final` or `error`) has been written or the call was aborted; after
 * that, nothing more is written and anything the tool produces is ignored.
 *
 * With `drain: true` an async-iterable result is consumed to its last value and
 * reported as one `final` frame instead of streaming `chunk` frames.
 */
export class Call {
  #request;
  #write;
  #drain;
  #receivedAt;
  #asyncTool;
  #controller = new AbortController();
  #timer;
  #outputBytes = 0;
  #finished = false;
  #settle;
  #done = new Promise((resolve) => {
    this.#settle = resolve;
  });

  /**
   * `write(line)` receives each NDJSON line; `receivedAt` is a performance.now()
   * timestamp; `asyncTool` holds members (e.g. `heartbeat`) added to
   * `ctx.asyncTool`, which otherwise is a copy of the request's async metadata.
   */
  constructor(request, { write, drain = false, receivedAt = performance.now(), asyncTool = {} }) {
    this.#request = request;
    this.#write = write;
    this.#drain = drain;
    this.#receivedAt = receivedAt;
    this.#asyncTool = asyncTool;
  }

  start(cache) {
    const { deadlineMs } = this.#request;
    const remainingMs = Math.max(0, deadlineMs - (performance.now() - this.#receivedAt));
    this.#timer = setTimeout(() => this.#stop('DeadlineExceeded', `deadline of ${deadlineMs} ms exceeded`), remainingMs);
    currentCall.run(this, () => this.#run(cache, Math.max(1, Math.ceil(remainingMs))));
    return this.#done;
  }

  /** Ends the call with a `Cancelled` frame; false if it had already finished. */
  cancel() {
    return this.#stop('Cancelled', 'call was cancelled');
  }

  /** Fires the signal and stops the call without writing anything (the client is gone). */
  abort() {
    this.#terminate(null, new PlatformError('ClientDisconnected', 'client disconnected'));
  }

  /** Emits a log frame; false if the call has already finished. */
  log(level, args) {
    if (this.#finished) return false;
    this.#write(frameLine({ t: 'log', level, message: format(...args) }));
    return true;
  }

  async #run(cache, downloadTimeoutMs) {
    const { config, callId, idempotencyKey, input, bundle } = this.#request;
    try {
      const tool = await cache.load(bundle, downloadTimeoutMs);
      if (this.#finished) return;
      const ctx = {
        config,
        callId,
        idempotencyKey,
        signal: this.#controller.signal,
        log: (...args) => logTo(this, 'info', args),
      };
      if (this.#request.traceparent !== undefined) ctx.traceparent = this.#request.traceparent;
      if (this.#request.fetch !== undefined) ctx.fetch = serverFetch(this.#request.fetch, this.#controller.signal);
      if (this.#request.async !== null) ctx.asyncTool = { ...this.#request.async, ...this.#asyncTool };

      const result = await tool.execute(ctx, input);
      if (typeof result?.[Symbol.asyncIterator] !== 'function') {
        this.#emitValue('final', result);
      } else if (this.#drain) {
        let last = null;
        for await (const value of result) {
          if (this.#finished) return;
          last = value;
        }
        this.#emitValue('final', last);
      } else {
        for await (const value of result) {
          if (this.#finished || !this.#emitValue('chunk', value)) return;
        }
        this.#terminate(frameLine({ t: 'end' }));
      }
    } catch (err) {
      this.#terminate(frameLine({ t: 'error', name: err?.name ?? 'Error', message: err?.message ?? String(err) }));
    }
  }

  // Writes a chunk or final frame, enforcing maxOutputBytes over the call's values.
  // Returns false if the call is (now) finished.
  #emitValue(t, value) {
    if (this.#finished) return false;
    const json = JSON.stringify(value) ?? 'null';
    this.#outputBytes += Buffer.byteLength(json);
    const { maxOutputBytes } = this.#request;
    if (this.#outputBytes > maxOutputBytes) {
      this.#stop('OutputTooLarge', `output exceeds maxOutputBytes (${maxOutputBytes})`);
      return false;
    }
    const line = `{"t":"${t}","value":${json}}\n`;
    if (t === 'final') return this.#terminate(line);
    this.#write(line);
    return true;
  }

  // Ends the call on the platform's initiative (deadline, output size, cancel): an
  // error frame, then the tool's signal fires with the same error as its reason.
  #stop(name, message) {
    return this.#terminate(frameLine({ t: 'error', name, message }), new PlatformError(name, message));
  }

  #terminate(line, abortReason) {
    if (this.#finished) return false;
    this.#finished = true;
    clearTimeout(this.#timer);
    if (line) this.#write(line);
    if (abortReason) this.#controller.abort(abortReason);
    this.#settle();
    return true;
  }
}
