// Routes a runner's outbound traffic through the server's egress proxy when
// it has one. Imported before any tool code runs. The proxy is either
// - TOOLSERVER_EGRESS_SOCKET: a unix socket of this runner alone (a local
//   runner; its network namespace holds nothing else), or
// - TOOLSERVER_EGRESS_PROXY: `host:port` of a proxy shared by many runners (a
//   Kubernetes pod; its NetworkPolicy admits nothing else). Each CONNECT
//   there carries an egress token in Proxy-Authorization: the server sends
//   one with every call (`grantEgress`), naming this runner's tool, its
//   allow list and the call's bundle URL, valid until the call's deadline.
//
// - fetch: the global dispatcher opens every connection as a CONNECT tunnel
//   over the proxy socket (TLS inside it for https), so tool code calls
//   external APIs unchanged. A refusal rejects the fetch with the proxy's
//   reason as `err.cause.message`.
// - node:http and node:https: every Agent (the global ones and those a
//   library makes) opens its connections the same way, so `http.get`,
//   `https.request` and the libraries built on them work unchanged; a
//   refusal is the request's 'error' with the proxy's reason.
// - HTTP_PROXY / HTTPS_PROXY point at a loopback relay to the same proxy,
//   for clients that honour them (they must use CONNECT).

import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';

const socketPath = process.env.TOOLSERVER_EGRESS_SOCKET;
const sharedProxy = parseAuthority(process.env.TOOLSERVER_EGRESS_PROXY);
const HEAD_LIMIT = 16 * 1024;
const GRANTS_KEPT = 64;

/** Egress tokens of recent calls, by token: when each expires (ms). */
const grants = new Map();
let newestGrant;

/** `{ host, port }` of a `host:port` setting (IPv6 in brackets), or undefined. */
function parseAuthority(text) {
  if (!text) return undefined;
  const match = /^\[?([^\]]+?)\]?:(\d+)$/.exec(text);
  if (!match) throw new Error(`worker: TOOLSERVER_EGRESS_PROXY must be host:port, not ${JSON.stringify(text)}`);
  return { host: match[1], port: Number(match[2]) };
}

/** When `token` (a JWT) expires, in ms; a minute from now if unreadable. */
function expiryOf(token) {
  try {
    const exp = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8')).exp;
    if (Number.isFinite(exp)) return exp * 1000;
  } catch {}
  return Date.now() + 60_000;
}

/**
 * Keeps the egress token a call brought, for the shared proxy. The newest
 * token is used while it lasts (it carries the tool's latest allow list),
 * then the longest-lived one left (a longer call still running).
 */
export function grantEgress(token) {
  if (typeof token !== 'string' || token === '') return;
  grants.set(token, expiryOf(token));
  newestGrant = token;
  if (grants.size > GRANTS_KEPT) {
    const soonest = [...grants].sort((a, b) => a[1] - b[1])[0][0];
    grants.delete(soonest);
  }
}

/** The token to present now, if any is unexpired. */
function currentGrant() {
  const now = Date.now();
  for (const [token, expires] of grants) if (expires <= now) grants.delete(token);
  if (grants.has(newestGrant)) return newestGrant;
  let best;
  for (const [token, expires] of grants) if (best === undefined || expires > grants.get(best)) best = token;
  return best;
}

/** A connection to the proxy, and the header lines its CONNECT needs. */
function openProxy() {
  if (socketPath) return { socket: net.connect(socketPath), headers: '' };
  const socket = net.connect(sharedProxy);
  socket.setNoDelay(true);
  const token = currentGrant();
  return { socket, headers: token ? `proxy-authorization: Bearer ${token}\r\n` : '' };
}

/** `host:port` as a CONNECT target (IPv6 literals in brackets). */
function authorityOf(host, port) {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  return net.isIPv6(bare) ? `[${bare}]:${port}` : `${bare}:${port}`;
}

/** Opens a CONNECT tunnel to `authority`; resolves with the socket once the proxy said 200. */
function tunnel(authority) {
  return new Promise((resolve, reject) => {
    const { socket, headers } = openProxy();
    let seen = Buffer.alloc(0);
    const fail = (err) => {
      socket.destroy();
      reject(err);
    };
    const onData = (chunk) => {
      seen = Buffer.concat([seen, chunk]);
      const end = seen.indexOf('\r\n\r\n');
      if (end < 0) {
        if (seen.length > HEAD_LIMIT) fail(new Error('the egress proxy sent an oversized answer'));
        return;
      }
      const head = seen.subarray(0, end).toString('latin1');
      const status = Number(head.slice(9, 12));
      if (status === 200) {
        socket.off('data', onData).off('error', fail).off('end', onEnd);
        const rest = seen.subarray(end + 4);
        if (rest.length > 0) socket.unshift(rest);
        resolve(socket);
        return;
      }
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      const body = seen.subarray(end + 4);
      if (body.length >= length) fail(new Error(body.subarray(0, length).toString('utf8') || `egress to ${authority} answered ${status}`));
    };
    const onEnd = () => fail(new Error(`the egress proxy closed the connection to ${authority}`));
    socket.on('data', onData).on('error', fail).on('end', onEnd);
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nhost: ${authority}\r\n${headers}\r\n`);
  });
}

/**
 * undici's connector contract: `(options, callback(err, socket))`; `tlsOptions`
 * (CA, client certificate, checks) apply to an https connection.
 */
function connect(options, callback, tlsOptions = { ALPNProtocols: ['http/1.1'] }) {
  const secure = options.protocol === 'https:';
  const port = Number(options.port) || (secure ? 443 : 80);
  tunnel(authorityOf(options.hostname, port)).then(
    (socket) => {
      if (!secure) {
        callback(null, socket);
        return;
      }
      const host = options.hostname.replace(/^\[(.*)\]$/, '$1');
      const servername = options.servername || (net.isIP(host) ? undefined : host);
      const wrapped = tls.connect({ ...tlsOptions, socket, servername });
      wrapped.once('secureConnect', () => callback(null, wrapped)).once('error', (err) => callback(err));
    },
    (err) => callback(err),
  );
}

/** The target of a node:http(s) agent connection, as `connect` takes it. */
function target(options, protocol) {
  return { protocol, hostname: options.host ?? options.hostname ?? 'localhost', port: options.port, servername: options.servername };
}

/** The TLS options of an https agent connection, for TLS inside the tunnel. */
function tlsOptionsOf(options) {
  const { ca, cert, key, pfx, passphrase, rejectUnauthorized, checkServerIdentity, minVersion, maxVersion, ciphers } = options;
  const picked = { ca, cert, key, pfx, passphrase, rejectUnauthorized, checkServerIdentity, minVersion, maxVersion, ciphers };
  for (const name of Object.keys(picked)) if (picked[name] === undefined) delete picked[name];
  return picked;
}

// Every node:http(s) Agent, the global ones and those libraries make, opens
// its connections through the tunnel (a unix socketPath stays local).
function routeHttpModules() {
  const plain = http.Agent.prototype.createConnection;
  http.Agent.prototype.createConnection = function createConnection(options, callback) {
    if (options.socketPath) return plain.call(this, options, callback);
    connect(target(options, 'http:'), callback);
    return undefined;
  };
  const secure = https.Agent.prototype.createConnection;
  https.Agent.prototype.createConnection = function createConnection(options, callback) {
    if (options.socketPath) return secure.call(this, options, callback);
    connect(target(options, 'https:'), callback, tlsOptionsOf(options));
    return undefined;
  };
}

// fetch's global dispatcher slot (shared by every undici copy, Node's own
// included); Node exposes no public way to its Agent class, so one is
// borrowed from the dispatcher Node installs on its first fetch.
const DISPATCHER = Symbol.for('undici.globalDispatcher.1');

async function routeFetch() {
  await fetch('data:,');
  const Agent = globalThis[DISPATCHER]?.constructor;
  if (typeof Agent !== 'function') throw new Error('worker: no fetch dispatcher to route through the egress proxy');
  globalThis[DISPATCHER] = new Agent({ connect });
}

// A loopback relay for clients that honour HTTP(S)_PROXY: it reads their
// CONNECT and opens the tunnel as fetch does (with the current egress
// token), answering 200 or the proxy's refusal.
function relayProxyVariables() {
  const relay = net.createServer((client) => {
    let seen = Buffer.alloc(0);
    const onData = (chunk) => {
      seen = Buffer.concat([seen, chunk]);
      const end = seen.indexOf('\r\n\r\n');
      if (end < 0) {
        if (seen.length > HEAD_LIMIT) client.destroy();
        return;
      }
      client.off('data', onData).pause();
      const [method, authority] = seen.subarray(0, end).toString('latin1').split(' ');
      const rest = seen.subarray(end + 4);
      if (method !== 'CONNECT' || !authority) {
        refuse(client, 405, 'the egress relay takes CONNECT host:port only');
        return;
      }
      tunnel(authority).then(
        (upstream) => {
          client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
          if (rest.length > 0) upstream.write(rest);
          client.pipe(upstream).pipe(client);
          client.resume();
          upstream.on('error', () => client.destroy());
        },
        (err) => refuse(client, 403, err.message),
      );
    };
    client.on('data', onData).on('error', () => client.destroy());
  });
  relay.unref();
  relay.listen(0, '127.0.0.1', () => {
    const url = `http://127.0.0.1:${relay.address().port}`;
    for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy']) process.env[name] = url;
  });
}

/** Answers a relay client with `status` and `reason`, then closes. */
function refuse(client, status, reason) {
  const body = Buffer.from(reason, 'utf8');
  client.end(`HTTP/1.1 ${status} Refused\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${reason}`);
}

if (socketPath || sharedProxy) {
  await routeFetch();
  routeHttpModules();
  relayProxyVariables();
}
