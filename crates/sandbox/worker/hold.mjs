// The runner pod's main process: keeps the container alive while the server
// execs the worker into it, and exits promptly on SIGTERM/SIGINT.

for (const signal of ['SIGTERM', 'SIGINT']) process.once(signal, () => process.exit(0));
setInterval(() => {}, 2 ** 31 - 1);
