// The web console in a real browser: Debian's chromium, driven by
// Playwright, against a real `tide server` and real agents on loopback
// (tests/browser/cluster.mjs). Every flow waits on what the page shows,
// never on a sleep. Screenshots of every page, and the axe-core
// accessibility report of each, go to $TIDE_BROWSER_ARTIFACTS.
//
//   TIDE_BINARY=build/tide node --test tests/browser/console_test.mjs
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { Cluster, eventually } from './cluster.mjs';

// playwright-core and axe-core are the console's dev dependencies (web/).
const require = createRequire(new URL('../../web/package.json', import.meta.url));
const { chromium } = require('playwright-core');
const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

const ARTIFACTS = process.env.TIDE_BROWSER_ARTIFACTS || path.resolve('browser-artifacts');
const WAIT = 60_000;  // for anything the cluster does: a busy 2-core machine is slow

const cluster = new Cluster();
let browser;
const users = {};

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await cluster.startServer();
  await cluster.admin('POST', '/v1/admin/prices', { per_gpu_hour: { RTX4090: '0.4', A100: '1.2' } });
  await cluster.startAgent('a1', '2xRTX4090:24GB');
  users.carol = await cluster.startAgent('p1', '1xA100:80GB', 'carol');
  users.alice = await cluster.newUser('alice');
  users.bob = await cluster.newUser('bob');
  // Jobs without limits hold up to 100 credits each while they run.
  await cluster.credit(users.alice, 2000);
  await cluster.credit(users.bob, 500);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  if (browser) await browser.close();
  await cluster.stop();
});

// A page logged in as `token`, through the login form.
async function loggedIn(token, expectUser) {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1366, height: 768 } });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // A refused script or style (Content-Security-Policy) shows up here.
    if (m.type() === 'error' && /Content Security Policy/i.test(m.text())) problems.push(m.text());
  });
  page.problems = problems;
  await page.goto(`${cluster.url}/login`);
  await page.getByTestId('login-token').fill(token);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('session-user').filter({ hasText: expectUser }).waitFor();
  return page;
}

async function shot(page, name) {
  // From the top: a sticky header would otherwise be drawn mid-page.
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

// No serious or critical accessibility violation on the page as it is.
async function accessible(page, name) {
  const report = await page.evaluate(async (source) => {
    // eslint-disable-next-line no-eval
    (0, eval)(source);
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')) }));
  }, axeSource);
  fs.writeFileSync(path.join(ARTIFACTS, `${name}.axe.json`), JSON.stringify(report, null, 2));
  const bad = report.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad, [], `${name}: accessibility violations`);
}

function finish(page) {
  assert.deepEqual(page.problems, [], 'the page reported errors');
  return page.context().close();
}

async function jobStatus(token, id) {
  return (await cluster.api(token, 'GET', `/v1/jobs/${id}`)).status;
}

async function statusShown(page, status) {
  await page.locator(`[data-testid="job-status"][data-status="${status}"]`).waitFor();
}

test('logging in shows the jobs page; a bad token says why', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  await page.goto(`${cluster.url}/`);
  await page.getByTestId('login-form').waitFor();
  await shot(page, 'login');
  await accessible(page, 'login');
  await page.getByTestId('login-token').fill('tide_u_wrong');
  await page.getByTestId('login-submit').click();
  await page.getByRole('alert').filter({ hasText: /does not work|invalid/i }).first().waitFor();
  await context.close();

  const alice = await loggedIn(users.alice, 'alice');
  await alice.waitForURL(/\/jobs$/);
  await shot(alice, 'jobs-empty');
  await accessible(alice, 'jobs-empty');
  await finish(alice);
});

test('a one-time login link logs in once', async () => {
  const { path: link } = await cluster.admin('POST', '/v1/admin/login-links', { user: 'alice' });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  await page.goto(cluster.url + link);
  await page.getByTestId('session-user').filter({ hasText: 'alice' }).waitFor();
  await context.close();
  const again = await (await browser.newContext()).newPage();
  again.setDefaultTimeout(WAIT);
  await again.goto(cluster.url + link);
  await again.getByTestId('login-error').filter({ hasText: /expired or was used/ }).waitFor();
  await again.context().close();
});

test('a job submitted from the form, with a code upload, runs', async () => {
  const dir = fs.mkdtempSync(path.join(cluster.dir, 'code-'));
  fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello from the code archive\n');
  const archive = path.join(cluster.dir, 'code.tar.gz');
  execFileSync('tar', ['-czf', archive, '-C', dir, 'hello.txt']);

  const page = await loggedIn(users.alice, 'alice');
  await page.getByTestId('nav-new').click();
  await page.getByTestId('new-job-form').waitFor();
  await page.getByTestId('spec-name').fill('from-the-form');
  await page.getByTestId('spec-command').fill("sh -c 'cat hello.txt; echo done'");
  await page.locator('[data-testid="gpu-option"][data-model="RTX4090"]').click();
  await page.getByTestId('code-archive').setInputFiles(archive);
  await page.getByTestId('code-uploaded').waitFor();
  await page.getByTestId('estimate-button').click();
  await page.getByTestId('estimate-total').waitFor();
  await shot(page, 'new-job');
  await accessible(page, 'new-job');
  await page.getByTestId('submit-job').click();
  await page.waitForURL(/\/jobs\/j-[0-9a-f]+$/);
  const id = page.url().split('/').pop();
  await statusShown(page, 'completed');
  await page.getByTestId('log').filter({ hasText: 'hello from the code archive' }).waitFor();
  await shot(page, 'job-completed');
  await accessible(page, 'job-completed');
  const job = await cluster.api(users.alice, 'GET', `/v1/jobs/${id}`);
  assert.equal(job.name, 'from-the-form');
  await finish(page);
});

test('log lines arrive while the job runs, and cancel stops it', async () => {
  const job = await cluster.api(users.alice, 'POST', '/v1/jobs', {
    name: 'ticker',
    command: ['sh', '-c', 'i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo tick-$i; sleep 0.2; done'],
  });
  const page = await loggedIn(users.alice, 'alice');
  const followed = [];
  page.on('request', (r) => {
    if (r.url().includes(`/v1/jobs/${job.id}/telemetry?follow=true`)) followed.push(r.url());
  });
  await page.goto(`${cluster.url}/jobs/${job.id}`);
  await statusShown(page, 'running');
  // A line printed after the page was drawn appears without a reload.
  const log = page.getByTestId('log');
  await log.filter({ hasText: /tick-\d/ }).waitFor();
  const seen = Number((await log.textContent()).match(/tick-(\d+)\s*$/)?.[1] ?? 0);
  await log.filter({ hasText: `tick-${seen + 5}` }).waitFor();
  // GPU readings arrive the same way, pushed by the server with each
  // heartbeat of the agent.
  const telemetry = page.getByTestId('telemetry');
  const readings = async () => Number(await telemetry.getAttribute('data-readings'));
  await eventually(async () => (await readings()) > 0, WAIT, 'a first GPU reading');
  const first = await readings();
  await eventually(async () => (await readings()) >= first + 3, WAIT, 'three more GPU readings');
  assert.ok(followed.length >= 1, 'the page follows the telemetry stream');
  await page.getByTestId('chart-utilization').waitFor();
  await shot(page, 'job-running');
  await page.getByTestId('cancel-job').click();
  await page.getByTestId('cancel-job-yes').click();
  await statusShown(page, 'cancelled');
  assert.equal(await jobStatus(users.alice, job.id), 'cancelled');
  await finish(page);
});

test('the jobs list follows changes live and filters by status', async () => {
  const page = await loggedIn(users.alice, 'alice');
  await page.getByTestId('jobs-table').waitFor();
  const job = await cluster.api(users.alice, 'POST', '/v1/jobs', { name: 'appears-live', command: ['sleep', '1'] });
  // It appears, and moves to completed, with no reload.
  const row = page.locator(`[data-testid="job-row"][data-job-id="${job.id}"]`);
  await row.waitFor();
  await row.locator('[data-status="completed"]').waitFor();
  // The server filters: only cancelled jobs (the ticker above) remain.
  await page.getByTestId('filter-status-cancelled').check();
  await page.getByTestId('filter-apply').click();
  const rows = page.getByTestId('job-row');
  await eventually(async () => {
    const statuses = await rows.evaluateAll((els) => els.map((e) => e.dataset.status));
    return statuses.length > 0 && statuses.every((s) => s === 'cancelled');
  }, WAIT, 'only cancelled jobs listed');
  await page.getByTestId('filter-clear').click();
  await row.waitFor();
  await shot(page, 'jobs');
  await accessible(page, 'jobs');
  await finish(page);
});

test('an output downloads byte for byte', async () => {
  const job = await cluster.api(users.alice, 'POST', '/v1/jobs', {
    name: 'writes-a-model',
    command: ['sh', '-c', 'head -c 250000 /dev/urandom > $TIDE_OUTPUT_DIR/model.bin'],
  });
  await eventually(async () => (await jobStatus(users.alice, job.id)) === 'completed', WAIT, 'the job to complete');
  const page = await loggedIn(users.alice, 'alice');
  await page.goto(`${cluster.url}/jobs/${job.id}`);
  const link = page.getByTestId('output-link').filter({ hasText: 'model.bin' });
  await link.waitFor();
  const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
  const saved = path.join(cluster.dir, 'downloaded-model.bin');
  await download.saveAs(saved);
  const res = await fetch(`${cluster.url}/v1/jobs/${job.id}/outputs/model.bin`, {
    headers: { Authorization: `Bearer ${users.alice}` },
  });
  const original = Buffer.from(await res.arrayBuffer());
  const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
  assert.equal(original.length, 250000);
  assert.equal(sha(fs.readFileSync(saved)), sha(original));
  await finish(page);
});

test('a bad spec is shown at the field the server names', async () => {
  const page = await loggedIn(users.alice, 'alice');
  await page.goto(`${cluster.url}/new`);
  await page.getByTestId('spec-command').fill('true');
  await page.getByTestId('spec-gpu_count').fill('0');
  await page.getByTestId('submit-job').click();
  const error = page.getByTestId('error-resources.gpu_count');
  await error.waitFor();
  assert.match(await error.textContent(), /at least 1/);
  await shot(page, 'new-job-error');
  assert.match(page.url(), /\/new$/, 'nothing was submitted');
  await finish(page);
});

test('a Slurm batch script pasted in the page runs; a YAML error names its line', async () => {
  const page = await loggedIn(users.alice, 'alice');
  await page.goto(`${cluster.url}/new`);
  await page.getByTestId('tab-file').click();
  await page.getByTestId('spec-text').fill(
    'resources:\n  gpu_count: 0\ncommand: [sh, -c, "echo hi"]\n');
  await page.getByTestId('spec-file-submit').click();
  await page.getByTestId('spec-file-error').filter({ hasText: /spec\.yaml:2: resources\.gpu_count/ }).waitFor();
  await page.getByTestId('spec-text').fill([
    '#!/bin/bash',
    '#SBATCH --job-name=from-sbatch',
    '#SBATCH --gres=gpu:1',
    '#SBATCH --time=5',
    'echo "hello from $SLURM_JOB_NAME"',
    '',
  ].join('\n'));
  await shot(page, 'new-job-sbatch');
  await page.getByTestId('spec-file-submit').click();
  await page.waitForURL(/\/jobs\/j-[0-9a-f]+$/);
  await statusShown(page, 'completed');
  await page.getByTestId('log').filter({ hasText: 'hello from from-sbatch' }).waitFor();
  await finish(page);
});

test('redeeming a card raises the balance', async () => {
  const { codes } = await cluster.admin('POST', '/v1/admin/cards', { count: 1, value: 25 });
  const page = await loggedIn(users.bob, 'bob');
  await page.getByTestId('nav-account').click();
  const balance = page.getByTestId('balance');
  await balance.waitFor();
  const before = Number((await balance.textContent()).replace(/[^0-9.]/g, ''));
  await page.getByTestId('redeem-code').fill(codes[0]);
  await page.getByTestId('redeem-submit').click();
  await page.getByTestId('redeem-result').waitFor();
  await page.getByTestId('daily-cap').filter({ hasText: 'No daily cap' }).waitFor();
  await eventually(async () => Number((await balance.textContent()).replace(/[^0-9.]/g, '')) === before + 25,
    WAIT, 'the balance to rise by 25');
  await shot(page, 'account');
  await accessible(page, 'account');
  await finish(page);
});

test('a session left open in another browser is ended from the account page', async () => {
  const elsewhere = await loggedIn(users.bob, 'bob');
  const page = await loggedIn(users.bob, 'bob');
  await page.getByTestId('nav-account').click();
  const rows = page.getByTestId('session-row');
  await eventually(async () => (await rows.count()) >= 2, WAIT, 'two sessions listed');
  await page.getByTestId('sessions-table').filter({ hasText: 'this browser' }).waitFor();
  // Oldest first: the newest of the others is the browser opened just before.
  const id = await rows.filter({ has: page.getByTestId('end-session') }).last().getAttribute('data-session-id');
  // By its id: once asked, the row shows the question, not the button.
  const other = page.locator(`[data-testid="session-row"][data-session-id="${id}"]`);
  await other.getByTestId('end-session').click();
  await other.getByTestId('end-session-yes').click();
  await page.locator(`[data-session-id="${id}"]`).waitFor({ state: 'detached' });
  // The other browser is logged out at its next request.
  await elsewhere.reload();
  await elsewhere.getByTestId('login-token').waitFor();
  await shot(page, 'account-sessions');
  await accessible(page, 'account-sessions');
  await finish(page);
  await elsewhere.context().close();
});

test("another user's job is not found, and not listed", async () => {
  const theirs = await cluster.api(users.bob, 'POST', '/v1/jobs', { name: 'bobs-secret', command: ['true'] });
  const page = await loggedIn(users.alice, 'alice');
  await page.getByTestId('jobs-table').waitFor();
  assert.equal(await page.locator(`[data-job-id="${theirs.id}"]`).count(), 0);
  await page.goto(`${cluster.url}/jobs/${theirs.id}`);
  await page.getByTestId('job-not-found').waitFor();
  assert.doesNotMatch(await page.content(), /bobs-secret/);
  await finish(page);
});

test('a provider sees its node and what it earned', async () => {
  const job = await cluster.api(users.alice, 'POST', '/v1/jobs', {
    name: 'on-carols-gpu',
    command: ['sleep', '2'],
    resources: { gpu_type: 'A100', gpu_count: 1 },
  });
  await eventually(async () => (await jobStatus(users.alice, job.id)) === 'completed', WAIT, 'the A100 job to complete');
  const page = await loggedIn(users.carol, 'carol');
  await page.getByTestId('nav-provider').click();
  await page.getByTestId('provider-node').filter({ hasText: 'p1' }).waitFor();
  const total = page.getByTestId('earnings-total');
  await total.waitFor();
  assert.ok(Number((await total.textContent()).replace(/[^0-9.]/g, '')) > 0, 'carol earned something');
  // What her node asks: she set no price, so the exchange's list price.
  await page.getByTestId('node-asks').filter({ hasText: "A100 1.2 (the exchange's list price)" }).waitFor();
  // Her GPU over time, and her earnings over time.
  await page.getByTestId('provider-node').filter({ hasText: 'p1' }).getByTestId('node-chart-utilization').waitFor();
  await page.getByTestId('chart-earnings').waitFor();
  // The consumer's job is not shown to the provider by name.
  assert.doesNotMatch(await page.content(), /on-carols-gpu/);
  await shot(page, 'provider');
  await accessible(page, 'provider');
  await finish(page);
});

test('the operator mints cards, shown once', async () => {
  const page = await loggedIn(cluster.adminToken, 'admin');
  await page.getByTestId('nav-operator').click();
  await page.getByTestId('queue-gpus').waitFor();
  await page.getByTestId('mint-count').fill('2');
  await page.getByTestId('mint-value').fill('5');
  await page.getByTestId('mint-submit').click();
  const codes = page.getByTestId('minted-code');
  await eventually(async () => (await codes.count()) === 2, WAIT, 'two codes');
  for (const c of await codes.allTextContents()) assert.match(c, /TIDE-/);
  // Users with their fair-share standing; a weight set in place holds.
  const bob = page.locator('[data-testid="user-row"][data-user="bob"]');
  await bob.waitFor();
  await page.locator('[data-testid="user-row"][data-user="alice"]').waitFor();
  await bob.getByTestId('weight-value').fill('3');
  await bob.getByTestId('weight-set').click();
  await eventually(async () => (await cluster.admin('GET', `/v1/admin/users/bob/weight`)).weight === 3, WAIT,
    "bob's weight to be 3");
  // Once the table has read it back, the field holds the row's weight: no
  // change to set.
  await eventually(async () => await bob.getByTestId('weight-set').isDisabled(), WAIT,
    'the table to read the weight back');
  await bob.getByTestId('weight-value').fill('-1');
  await bob.getByTestId('weight-set').click();
  await bob.getByTestId('weight-error').filter({ hasText: /above 0/ }).waitFor();
  await shot(page, 'operator');
  await accessible(page, 'operator');
  await finish(page);
});

test('a batch shows its trials', async () => {
  const batch = await cluster.api(users.alice, 'POST', '/v1/batches', {
    experiment_batch: 'sweep-lr',
    template: { command: ['sh', '-c', 'echo "{{\\"step\\": 1, \\"loss\\": {lr}}}" > $TIDE_METRICS_FILE'] },
    jobs: [{ id: 'lr-1', lr: 0.1 }, { id: 'lr-2', lr: 0.01 }],
  });
  const page = await loggedIn(users.alice, 'alice');
  await page.getByTestId('nav-batches').click();
  await page.locator(`[data-testid="batch-row"]`).first().waitFor();
  await shot(page, 'batches');
  await accessible(page, 'batches');
  await page.goto(`${cluster.url}/batches/${batch.id}`);
  await page.getByTestId('trials-table').waitFor();
  await eventually(async () => (await page.getByTestId('trial-row').count()) === 2, WAIT, 'two trials');
  await shot(page, 'batch');
  await accessible(page, 'batch');
  await finish(page);
});
