// Bundle acquisition: inline and downloaded bundles, hash verification, the
// on-disk cache (including corruption and restarts) and cache root selection.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  deferred,
  health,
  invoke,
  invokeRequest,
  makeBundle,
  openInvoke,
  startHub,
  startTestWorker,
  startWorker,
  tempDir,
} from './helpers.mjs';

const TEST = { timeout: 10_000 };

// A ~200 KB bundle: real code plus a large string constant.
const largeBundle = makeBundle(`
const padding = ${JSON.stringify('p'.repeat(200 * 1024))};
export default {
  execute(ctx, input) {
    return { version: 'large', padding: padding.length, input };
  },
};
`);

const versioned = (version) => makeBundle(`export default { execute: () => ({ version: '${version}' }) };`);

/** Serves `bundle` at `path` on the hub; returns the bundle's URL. */
function serve(hub, path, bundle) {
  hub.handle(path, (req, res) => res.end(bundle.bytes));
  return hub.url + path;
}

const byUrl = (bundle, url, overrides) => invokeRequest(bundle, { bundle: { sha256: bundle.sha256, url }, ...overrides });

const counters = async (socket) => {
  const { modulesLoaded, downloads, cacheHits } = await health(socket);
  return { modulesLoaded, downloads, cacheHits };
};

test('a downloaded bundle is fetched once, cached on disk, and survives restarts', TEST, async (t) => {
  const dir = await tempDir(t);
  const cacheRoots = join(dir, 'cache');
  const cachedFile = join(cacheRoots, largeBundle.sha256, 'bundle.mjs');
  const hub = await startHub(t);
  const url = serve(hub, '/large.mjs', largeBundle);
  const expected = [{ t: 'final', value: { version: 'large', padding: 200 * 1024, input: 7 } }];
  const run = async (cacheRootsForWorker) => {
    const worker = await startWorker(dir, { cacheRoots: cacheRootsForWorker });
    t.after(() => worker.stop());
    return worker;
  };

  // First worker: one download, then served from memory.
  const first = await run(cacheRoots);
  assert.deepEqual(await invoke(first.socket, byUrl(largeBundle, `${url}?sig=1`, { input: 7 })), expected);
  assert.deepEqual(await invoke(first.socket, byUrl(largeBundle, `${url}?sig=2`, { input: 7 })), expected);
  assert.equal(hub.count('/large.mjs'), 1);
  assert.deepEqual(await counters(first.socket), { modulesLoaded: 1, downloads: 1, cacheHits: 1 });
  assert.deepEqual(await readFile(cachedFile), largeBundle.bytes);
  await first.stop();

  // Restarted worker: served from disk without touching the network.
  const second = await run(cacheRoots);
  assert.deepEqual(await invoke(second.socket, byUrl(largeBundle, url, { input: 7 })), expected);
  assert.equal(hub.count('/large.mjs'), 1);
  assert.deepEqual(await counters(second.socket), { modulesLoaded: 1, downloads: 0, cacheHits: 1 });
  await second.stop();

  // A corrupted cached file is detected, discarded and fetched again.
  await appendFile(cachedFile, '\nexport const tampered = true;\n');
  const third = await run(cacheRoots);
  assert.deepEqual(await invoke(third.socket, byUrl(largeBundle, url, { input: 7 })), expected);
  assert.equal(hub.count('/large.mjs'), 2);
  assert.deepEqual(await counters(third.socket), { modulesLoaded: 1, downloads: 1, cacheHits: 0 });
  assert.deepEqual(await readFile(cachedFile), largeBundle.bytes);
});

test('a corrupted cached file with an inline bundle is replaced by the inline bytes', TEST, async (t) => {
  const dir = await tempDir(t);
  const tool = versioned('inline');
  const cachedFile = join(dir, 'cache', tool.sha256, 'bundle.mjs');
  const first = await startWorker(dir);
  t.after(() => first.stop());
  await invoke(first.socket, invokeRequest(tool));
  await first.stop();

  await writeFile(cachedFile, "export default { execute: () => 'evil' };");
  const second = await startWorker(dir);
  t.after(() => second.stop());
  assert.deepEqual(await invoke(second.socket, invokeRequest(tool)), [{ t: 'final', value: { version: 'inline' } }]);
  assert.deepEqual(await counters(second.socket), { modulesLoaded: 1, downloads: 0, cacheHits: 0 });
  assert.deepEqual(await readFile(cachedFile), tool.bytes);
});

test('bytes that do not match bundle.sha256 fail with BundleIntegrityError and are not cached', TEST, async (t) => {
  const { socket, dir } = await startTestWorker(t);
  const hub = await startHub(t);
  const claimed = versioned('claimed');
  const actual = versioned('actual');

  const inline = invokeRequest(claimed, { bundle: { sha256: claimed.sha256, inline: actual.inline } });
  const downloaded = byUrl(claimed, serve(hub, '/wrong.mjs', actual));
  for (const request of [inline, downloaded]) {
    const frames = await invoke(socket, request);
    assert.equal(frames.length, 1);
    assert.equal(frames[0].name, 'BundleIntegrityError');
    assert.match(frames[0].message, new RegExp(actual.sha256));
  }
  assert.equal(existsSync(join(dir, 'cache', claimed.sha256)), false);

  // The failed load is not remembered: correct bytes for the same hash now work.
  assert.deepEqual(await invoke(socket, invokeRequest(claimed)), [{ t: 'final', value: { version: 'claimed' } }]);
});

test('download failures are BundleFetchError without leaking the signed query string', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const tool = versioned('fetch');
  hub.handle('/redirect.mjs', (req, res) => res.writeHead(302, { location: serve(hub, '/real.mjs', tool) }).end());
  hub.handle('/broken.mjs', (req, res) => res.writeHead(500).end('oops'));

  for (const path of ['/missing.mjs', '/broken.mjs', '/redirect.mjs']) {
    const frames = await invoke(socket, byUrl(tool, `${hub.url}${path}?sig=secret`));
    assert.equal(frames.length, 1, path);
    assert.equal(frames[0].name, 'BundleFetchError', path);
    assert.ok(frames[0].message.includes(path), frames[0].message);
    assert.ok(!frames[0].message.includes('secret'), frames[0].message);
  }
  assert.equal(hub.count('/real.mjs'), 0);
  assert.equal((await health(socket)).downloads, 3);
});

test('a new hash loads new code while the old hash keeps its own module', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const v1 = versioned('v1');
  const v2 = versioned('v2');
  for (const [bundle, version] of [[v1, 'v1'], [v2, 'v2'], [v1, 'v1']]) {
    assert.deepEqual(await invoke(socket, invokeRequest(bundle)), [{ t: 'final', value: { version } }]);
  }
  assert.deepEqual(await counters(socket), { modulesLoaded: 2, downloads: 0, cacheHits: 1 });
});

test('concurrent first calls for one hash share a single download and load', TEST, async (t) => {
  const { socket } = await startTestWorker(t);
  const hub = await startHub(t);
  const tool = versioned('shared');
  const release = deferred();
  hub.handle('/shared.mjs', async (req, res) => {
    await release.promise;
    res.end(tool.bytes);
  });
  const calls = await Promise.all(
    Array.from({ length: 5 }, () => openInvoke(socket, byUrl(tool, `${hub.url}/shared.mjs`))),
  );
  // Every call has been accepted (headers received) before the download can complete.
  release.resolve();
  for (const call of calls) assert.deepEqual(await call.rest(), [{ t: 'final', value: { version: 'shared' } }]);
  assert.equal(hub.count('/shared.mjs'), 1);
  assert.deepEqual(await counters(socket), { modulesLoaded: 1, downloads: 1, cacheHits: 4 });
});

test('TOOLSERVER_CACHE_ROOTS picks the first writable root', TEST, async (t) => {
  const dir = await tempDir(t);
  const notADirectory = join(dir, 'file');
  await writeFile(notADirectory, '');
  const usable = join(dir, 'second-root');
  const tool = versioned('roots');
  const worker = await startWorker(dir, { cacheRoots: `${join(notADirectory, 'cache')}:${usable}:${join(dir, 'third')}` });
  t.after(() => worker.stop());

  assert.deepEqual(await invoke(worker.socket, invokeRequest(tool)), [{ t: 'final', value: { version: 'roots' } }]);
  assert.deepEqual(await readFile(join(usable, tool.sha256, 'bundle.mjs')), tool.bytes);
  assert.equal(existsSync(join(dir, 'third')), false);
});
