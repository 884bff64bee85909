// Connects stdin/stdout to the worker's unix socket, so a runner reached by
// exec (a Kubernetes pod) needs no listening port: `node bridge.mjs --socket
// <path>`. One bridge carries one HTTP/1.1 connection. When stdin ends (the
// caller is done or went away) the socket is closed, which aborts a call still
// streaming; when the worker closes the socket, the bridge exits.
// Exit 0 after a normal close; 1 (with a message on stderr) if the socket
// cannot be reached, so the caller sees no bytes at all.

import { connect } from 'node:net';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({ options: { socket: { type: 'string' } } });
if (!args.socket) {
  process.stderr.write('usage: node bridge.mjs --socket <path>\n');
  process.exit(2);
}

const finish = (code) => process.stdout.write('', () => process.exit(code));
const conn = connect(args.socket);
conn.on('error', (err) => {
  process.stderr.write(`bridge: ${err.message}\n`);
  finish(1);
});
conn.on('connect', () => {
  process.stdin.pipe(conn, { end: false });
  conn.pipe(process.stdout, { end: false });
  process.stdin.on('end', () => conn.destroy());
  process.stdin.on('close', () => conn.destroy());
  conn.on('close', () => finish(0));
});
