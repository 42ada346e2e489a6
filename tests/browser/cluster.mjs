// A real Tide on loopback for the browser tests: `tide server` and agents,
// started from the binary the build made and stopped by their pids.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const TIDE = process.env.TIDE_BINARY;

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Polls `cond` (async) every 100 ms until it is truthy or `ms` pass.
export async function eventually(cond, ms = 30_000, what = 'a condition') {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export class Cluster {
  constructor() {
    if (!TIDE) throw new Error('set TIDE_BINARY to the tide binary');
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tide-browser-'));
    fs.chmodSync(this.dir, 0o711);  // sandboxed jobs enter the agents' dirs
    this.children = [];
  }

  start(name, args) {
    const log = fs.openSync(path.join(this.dir, `${name}.log`), 'a');
    const child = spawn(TIDE, args, { stdio: ['ignore', log, log] });
    child.name = name;
    this.children.push(child);
    return child;
  }

  log(name) {
    try {
      return fs.readFileSync(path.join(this.dir, `${name}.log`), 'utf8');
    } catch {
      return '';
    }
  }

  // `extra`: more flags of `tide server`.
  async startServer(extra = []) {
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    this.server = this.start('server', ['server', '--listen', `127.0.0.1:${port}`, '--data-dir',
      path.join(this.dir, 'server'), '--node-timeout', '5s', ...extra]);
    await eventually(async () => (await fetch(`${this.url}/healthz`)).ok, 20_000,
      `the server (${this.log('server')})`);
    this.adminToken = fs.readFileSync(path.join(this.dir, 'server', 'admin.token'), 'utf8').trim();
  }

  // A request with a bearer token; the parsed answer, or an Error with the
  // server's message.
  async api(token, method, route, body) {
    const res = await fetch(this.url + route, {
      method,
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  }

  admin(method, route, body) {
    return this.api(this.adminToken, method, route, body);
  }

  async newUser(name) {
    return (await this.admin('POST', '/v1/admin/users', { name })).token;
  }

  // An agent with fake GPUs; with `provider`, its nodes earn for that user
  // (made if missing; its token is returned).
  async startAgent(name, gpus, provider) {
    const join = await this.admin('POST', '/v1/admin/join-tokens',
      provider ? { provider, create_provider: true } : {});
    const args = ['agent', '--server', this.url, '--data-dir', path.join(this.dir, `agent-${name}`),
      '--name', name, '--fake-gpus', gpus, '--heartbeat-interval', '500ms',
      '--join-token', join.token];
    if (process.getuid() !== 0) args.push('--runtime', 'process', '--insecure-process-runtime');
    const child = this.start(`agent-${name}`, args);
    await eventually(async () => {
      if (child.exitCode !== null) throw new Error(`agent ${name} exited: ${this.log(`agent-${name}`)}`);
      const { nodes } = await this.admin('GET', '/v1/nodes');
      return nodes.some((n) => n.name === name && n.state === 'ready');
    }, 30_000, `agent ${name} to register`);
    return join.provider_token;
  }

  // Credit for a user, through a card of `value` credits.
  async credit(token, value) {
    const { codes } = await this.admin('POST', '/v1/admin/cards', { count: 1, value });
    await this.api(token, 'POST', '/v1/cards/redeem', { code: codes[0] });
  }

  async stop() {
    // Agents first, then the server; each by its pid, killed if it lingers.
    const order = [...this.children.filter((c) => c !== this.server), this.server].filter(Boolean);
    for (const child of order) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      const exited = new Promise((r) => child.once('exit', r));
      process.kill(child.pid, 'SIGTERM');
      const timer = setTimeout(() => {
        if (child.exitCode === null) process.kill(child.pid, 'SIGKILL');
      }, 15_000);
      await exited;
      clearTimeout(timer);
    }
    if (!process.env.TIDE_BROWSER_KEEP) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
