// The web console under load: a real server and agent on loopback with
// --jobs jobs in the store, Debian's chromium driven by Playwright.
// Prints the time to the first render of the jobs page and of a job page,
// how long a line a job prints takes to be visible in its page, and the
// size of the first page's files. Exits non-zero if it measured nothing.
//
//   TIDE_BINARY=build/tide node bench/console_bench.mjs [--jobs 10000] [--rounds 5]
//     [--dist build/web/dist]
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import zlib from 'node:zlib';

import { Cluster } from '../tests/browser/cluster.mjs';

const require = createRequire(new URL('../web/package.json', import.meta.url));
const { chromium } = require('playwright-core');

function flag(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
}
const JOBS = Number(flag('jobs', '10000'));
const ROUNDS = Number(flag('rounds', '5'));
const DIST = flag('dist', path.join(path.dirname(process.env.TIDE_BINARY || 'build/tide'), 'web', 'dist'));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];

async function submitMany(cluster, token, n) {
  // Jobs that wait (no node has an H100), submitted over 8 connections.
  let next = 0;
  const ids = [];
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const job = await cluster.api(token, 'POST', '/v1/jobs', {
        name: `load-${i}`,
        command: ['true'],
        tags: [`t${i % 10}`],
        resources: { gpu_type: 'H100', gpu_count: 1 },
      });
      ids[i] = job.id;
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  return ids;
}

async function main() {
  const cluster = new Cluster();
  let browser;
  const failures = [];
  try {
    // It measures the console, not what one token is allowed per second.
    await cluster.startServer(['--token-rate-limit', 'off']);
    await cluster.startAgent('a1', '2xRTX4090:24GB');
    const alice = await cluster.newUser('alice');
    const t0 = Date.now();
    const ids = await submitMany(cluster, alice, JOBS);
    console.log(`${JOBS} jobs submitted in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage'],
    });
    const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
    const page = await context.newPage();
    page.setDefaultTimeout(60_000);
    await page.goto(`${cluster.url}/login`);
    await page.getByTestId('login-token').fill(alice);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('session-user').waitFor();

    // 1. The jobs page, from navigation to its first rows drawn. Each round
    // starts from a blank page; the files come from the browser's cache, as
    // they do for anyone who has opened the console before.
    const list = [];
    for (let r = 0; r < ROUNDS; r++) {
      await page.goto('about:blank');
      const start = Date.now();
      await page.goto(`${cluster.url}/jobs`);
      await page.getByTestId('job-row').first().waitFor();
      list.push(Date.now() - start);
    }
    const rows = await page.getByTestId('job-row').count();
    // 2. A job's page, for a job in the middle of the store.
    const one = [];
    for (let r = 0; r < ROUNDS; r++) {
      await page.goto('about:blank');
      const id = ids[Math.floor(ids.length / 2) + r];
      const start = Date.now();
      await page.goto(`${cluster.url}/jobs/${id}`);
      await page.locator('[data-testid="job-status"][data-status="queued"]').waitFor();
      one.push(Date.now() - start);
    }

    // 3. A line printed by a running job, to the line visible in its page:
    // each line is the time it was printed, in ms; the page notes when
    // each appears.
    const job = await cluster.api(alice, 'POST', '/v1/jobs', {
      name: 'clock',
      command: ['sh', '-c', 'while :; do date +%s%3N; sleep 0.25; done'],
      resources: { gpu_type: 'RTX4090', gpu_count: 1 },
      max_runtime: '5m',
    });
    await page.goto(`${cluster.url}/jobs/${job.id}`);
    await page.locator('[data-testid="job-status"][data-status="running"]').waitFor();
    await page.getByTestId('log').filter({ hasText: /\d{13}/ }).waitFor();
    const lags = await page.evaluate(async (want) => {
      const log = document.querySelector('[data-testid="log"]');
      const seen = new Set(log.textContent.split('\n'));
      const out = [];
      await new Promise((resolve) => {
        const obs = new MutationObserver(() => {
          const now = Date.now();
          for (const line of log.textContent.split('\n')) {
            if (!/^\d{13}$/.test(line) || seen.has(line)) continue;
            seen.add(line);
            out.push(now - Number(line));
          }
          if (out.length >= want) {
            obs.disconnect();
            resolve();
          }
        });
        obs.observe(log, { childList: true, characterData: true, subtree: true });
      });
      return out;
    }, 40);
    await cluster.api(alice, 'POST', `/v1/jobs/${job.id}/cancel`);

    // 4. What the first page loads.
    const index = fs.readFileSync(path.join(DIST, 'index.html'));
    const files = [index, ...fs.readdirSync(path.join(DIST, 'assets'))
      .filter((f) => /\.(js|css)$/.test(f))
      .map((f) => fs.readFileSync(path.join(DIST, 'assets', f)))];
    const raw = files.reduce((n, b) => n + b.length, 0);
    const gz = files.reduce((n, b) => n + zlib.gzipSync(b, { level: 9 }).length, 0);

    console.log(`jobs page, first render with ${JOBS} jobs in the store (${rows} rows drawn): ` +
      `median ${median(list)} ms (runs ${list.join(', ')})`);
    console.log(`job page, first render: median ${median(one)} ms (runs ${one.join(', ')})`);
    console.log(`a printed log line visible in the page after: p50 ${median(lags)} ms, ` +
      `p95 ${pct(lags, 0.95)} ms, max ${Math.max(...lags)} ms over ${lags.length} lines`);
    console.log(`first page: ${(raw / 1024).toFixed(1)} KB, ${(gz / 1024).toFixed(1)} KB gzipped ` +
      `(index.html and ${files.length - 1} files)`);
    if (!list.length || !one.length || lags.length < 10 || rows === 0 || raw === 0) {
      failures.push('measured nothing');
    }
  } catch (e) {
    failures.push(e.stack || String(e));
  } finally {
    if (browser) await browser.close();
    await cluster.stop();
  }
  if (failures.length) {
    console.error(failures.join('\n'));
    process.exit(1);
  }
}

await main();
