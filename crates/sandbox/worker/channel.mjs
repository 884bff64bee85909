// The worker's pod-network channel: with TOOLSERVER_CHANNEL_PORT set (a
// Kubernetes runner pod reached directly, not by exec), the worker also
// serves its HTTP API on TCP at TOOLSERVER_CHANNEL_HOST (the pod IP; default
// all addresses), and every request there must carry
// `authorization: Bearer <TOOLSERVER_CHANNEL_SECRET>` (the per-runner secret
// the server put in the pod spec); anything else is answered 401 before it
// reaches a route. The variables are removed from the environment before
// any tool code loads.

import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const MIN_SECRET_LENGTH = 32;

/** The channel's settings from the environment (then cleared), or null when there is none. */
export function channelSettings(env = process.env) {
  const { TOOLSERVER_CHANNEL_PORT: port, TOOLSERVER_CHANNEL_SECRET: secret, TOOLSERVER_CHANNEL_HOST: host } = env;
  delete env.TOOLSERVER_CHANNEL_PORT;
  delete env.TOOLSERVER_CHANNEL_SECRET;
  delete env.TOOLSERVER_CHANNEL_HOST;
  if (port === undefined || port === '') return null;
  const number = Number(port);
  if (!Number.isInteger(number) || number < 1 || number > 65535) {
    throw new Error(`TOOLSERVER_CHANNEL_PORT must be a TCP port, not ${JSON.stringify(port)}`);
  }
  if (typeof secret !== 'string' || secret.length < MIN_SECRET_LENGTH) {
    throw new Error(`TOOLSERVER_CHANNEL_SECRET must hold at least ${MIN_SECRET_LENGTH} characters`);
  }
  return { port: number, host: host || '0.0.0.0', secret };
}

const digest = (text) => createHash('sha256').update(text).digest();

/** Whether `header` is `Bearer <secret>`, compared in constant time. */
export function authorized(header, secret) {
  if (typeof header !== 'string' || !header.startsWith('Bearer ')) return false;
  return timingSafeEqual(digest(header.slice('Bearer '.length)), digest(secret));
}

/** Serves `handler` on the channel; resolves once it listens. */
export function listenChannel({ port, host, secret }, handler) {
  const server = createServer((req, res) => {
    if (authorized(req.headers.authorization, secret)) return handler(req, res);
    res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' });
    res.end(JSON.stringify({ error: 'this runner channel needs its bearer secret' }));
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}
