// Bundles the chat page (React, useChat and the AI SDK) into dist/app.js.
import { build } from 'esbuild';

await build({
  entryPoints: [new URL('./page/app.jsx', import.meta.url).pathname],
  outfile: new URL('./dist/app.js', import.meta.url).pathname,
  bundle: true,
  format: 'iife',
  jsx: 'automatic',
  target: 'es2022',
  define: { 'process.env.NODE_ENV': '"production"' },
  logLevel: 'warning',
});
