// The job callbacks of a detached call, posted by the worker to the server
// with the call's job token in `x-job-token`:
//
//   async.completeUrl   the outcome, once: {"status":"completed","response"} or {"status":"failed","error"}
//   async.heartbeatUrl  {"progress": ...} from the tool (ctx.asyncTool.heartbeat), and
//                       {"liveness": true} from the worker every async.livenessIntervalMs while the call runs
//
// Every attempt has its own timeout (TOOLSERVER_CALLBACK_TIMEOUT_MS, default
// 10 s), so an endpoint that never answers cannot hold a delivery forever.
// Network errors, timeouts, 429 and 5xx are retried; any other answer is final.
// An outcome is kept and its delivery tried again, with growing pauses, for
// async.completionRetryMs (default 60 s) from the first attempt: a server
// that stops answering for a while (paused, overloaded) still gets it when it
// answers again.

import { performance } from 'node:perf_hooks';
import { positiveIntFromEnv } from './runtime.mjs';

/** Milliseconds one callback attempt may take, answer body included. */
export const CALLBACK_TIMEOUT_MS = positiveIntFromEnv('TOOLSERVER_CALLBACK_TIMEOUT_MS', 10_000);
const DEFAULT_COMPLETION_RETRY_MS = 60_000;
const DELIVERY_BACKOFF_MS = 200;
const DELIVERY_BACKOFF_MAX_MS = 2_000;
const HEARTBEAT_ATTEMPTS = 3;
const HEARTBEAT_BACKOFF_MS = 100;
const LIVENESS_BODY = JSON.stringify({ liveness: true });

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One POST: {status} when the server answered, {error} when it did not. Never throws.
async function postOnce(url, token, body) {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-job-token': token },
      body,
      redirect: 'error',
      signal: AbortSignal.timeout(CALLBACK_TIMEOUT_MS),
    });
    await response.arrayBuffer();
    return { status: response.status };
  } catch (err) {
    return { error: err.cause?.message ?? err.message };
  }
}

const retryable = ({ status }) => status === undefined || status === 429 || status >= 500;
const accepted = ({ status }) => status >= 200 && status < 300;

// POSTs until an answer is final or the attempts run out; resolves with the last outcome.
async function post(url, token, body, attempts, backoffMs) {
  let outcome;
  for (let attempt = 0; attempt < attempts; attempt++) {
    if (attempt > 0) await sleep(backoffMs * 2 ** (attempt - 1));
    outcome = await postOnce(url, token, body);
    if (!retryable(outcome)) break;
  }
  return outcome;
}

// POSTs until an answer is final or `windowMs` has passed since the first
// attempt (which always goes out); resolves with the last outcome.
async function postWithin(url, token, body, windowMs) {
  const until = performance.now() + windowMs;
  let backoffMs = DELIVERY_BACKOFF_MS;
  for (;;) {
    const outcome = await postOnce(url, token, body);
    const left = until - performance.now();
    if (!retryable(outcome) || left <= 0) return outcome;
    await sleep(Math.min(backoffMs, left));
    backoffMs = Math.min(backoffMs * 2, DELIVERY_BACKOFF_MAX_MS);
  }
}

/**
 * Posts a detached call's outcome to `completeUrl`, for up to
 * `completionRetryMs` while the server does not take it; logs to stderr when
 * it could not be delivered.
 */
export async function deliverCompletion({ completeUrl, completionToken, completionRetryMs }, completion) {
  const windowMs = completionRetryMs ?? DEFAULT_COMPLETION_RETRY_MS;
  const outcome = await postWithin(completeUrl, completionToken, JSON.stringify(completion), windowMs);
  if (retryable(outcome)) {
    const reason = outcome.status === undefined ? outcome.error : `HTTP ${outcome.status}`;
    process.stderr.write(`worker: could not deliver the completion to ${completeUrl}: ${reason}\n`);
  }
}

/**
 * The tool's `ctx.asyncTool.heartbeat(progress)`: posts `{"progress": progress}`
 * (`{}` when progress is undefined) and resolves to `{ok: true}` when accepted,
 * `{ok: false, status}` for a final refusal (409 settled, 410 expired: stop) or
 * once retries of 429/5xx are used up, and `{ok: false, error}` when the server
 * could not be reached. Only a progress value JSON cannot encode rejects.
 */
export function heartbeater({ heartbeatUrl, completionToken }) {
  return async (progress) => {
    const body = JSON.stringify(progress === undefined ? {} : { progress });
    const outcome = await post(heartbeatUrl, completionToken, body, HEARTBEAT_ATTEMPTS, HEARTBEAT_BACKOFF_MS);
    if (accepted(outcome)) return { ok: true };
    if (outcome.status !== undefined) return { ok: false, status: outcome.status };
    return { ok: false, error: outcome.error };
  };
}

/**
 * Pings `heartbeatUrl` with `{"liveness": true}` every `livenessIntervalMs`
 * (no-op without both) until the returned function is called. A failed ping
 * is not retried (the next one follows); a final 4xx answer (the call is
 * settled or unknown) stops the pings. The timer never keeps the process alive.
 */
export function keepAlive({ heartbeatUrl, completionToken, livenessIntervalMs }) {
  if (heartbeatUrl === undefined || livenessIntervalMs === undefined) return () => {};
  let pinging = false;
  const timer = setInterval(async () => {
    if (pinging) return;
    pinging = true;
    const outcome = await postOnce(heartbeatUrl, completionToken, LIVENESS_BODY);
    pinging = false;
    if (!accepted(outcome) && !retryable(outcome)) clearInterval(timer);
  }, livenessIntervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
