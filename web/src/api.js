// The console's one way to the server: JSON requests under /v1 with the
// session cookie, the job event stream, and streamed text (live logs).
//
// The session cookie is HttpOnly; the page never sees it. What the page
// holds is the session's CSRF value, sent as X-Tide-CSRF on every request
// that is not a GET or HEAD (the server answers 403 without it). Errors
// come back as {"error": {"code", "message", "field"}} (docs/api.md) and
// are thrown as ApiError.

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status; // HTTP status; 0 when the server could not be reached
    this.code = code; // invalid_argument, not_found, insufficient_credit, ...
    this.field = field || ''; // the spec path at fault: resources.gpu_count, env.FOO
  }
}

let csrf = '';
let onUnauthenticated = null;

// Remembers the session's CSRF value (null or a session object).
export function setSession(session) {
  csrf = session ? session.csrf : '';
}

// Called with the error when a request finds the session gone (401), so
// the console can show the login page again.
export function whenUnauthenticated(fn) {
  onUnauthenticated = fn;
}

async function errorFrom(res) {
  let code = `http_${res.status}`;
  let message = res.statusText || `HTTP ${res.status}`;
  let field = '';
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
      field = body.error.field || '';
    }
  } catch {
    // Not JSON (a proxy's page, an empty body): keep the HTTP status.
  }
  return new ApiError(res.status, code, message, field);
}

function isBinary(body) {
  return body instanceof Blob || body instanceof ArrayBuffer || ArrayBuffer.isView(body);
}

// Sends one request and returns the parsed JSON answer (null for an empty
// body), or the Response itself with `raw`. Throws ApiError.
// `quiet401`: a 401 is the answer expected (login, the session check), not
// a lost session.
export async function request(method, path, opts = {}) {
  const { body, headers = {}, raw = false, signal, quiet401 = false } = opts;
  const h = { Accept: 'application/json', ...headers };
  let payload;
  if (body !== undefined && body !== null) {
    if (isBinary(body)) {
      payload = body;
      if (!h['Content-Type']) h['Content-Type'] = 'application/octet-stream';
    } else {
      payload = JSON.stringify(body);
      h['Content-Type'] = 'application/json';
    }
  }
  if (method !== 'GET' && method !== 'HEAD') h['X-Tide-CSRF'] = csrf;
  let res;
  try {
    res = await fetch(path, { method, headers: h, body: payload, credentials: 'same-origin', signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', `cannot reach the server (${e.message})`, '');
  }
  if (!res.ok) {
    const err = await errorFrom(res);
    if (res.status === 401 && !quiet401 && onUnauthenticated) onUnauthenticated(err);
    throw err;
  }
  if (raw) return res;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, opts) => request('GET', path, opts);
export const post = (path, body, opts) => request('POST', path, { ...opts, body });
export const put = (path, body, opts) => request('PUT', path, { ...opts, body });
export const del = (path, opts) => request('DELETE', path, opts);

// "/v1/jobs" + {status: ['queued', 'running'], q: ''} → "/v1/jobs?status=queued,running".
// Empty values and empty lists are left out; lists are comma-separated.
export function withQuery(path, params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '' || v === false) continue;
    const value = Array.isArray(v) ? v.join(',') : String(v);
    if (value === '') continue;
    parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(value).replace(/%2C/g, ',')}`);
  }
  return parts.length ? `${path}?${parts.join('&')}` : path;
}

// "/v1/jobs/j-1/outputs/" + "sub dir/a.pt" with each segment escaped.
export function pathJoin(base, rel) {
  return base + rel.split('/').map(encodeURIComponent).join('/');
}

// --- Session ---------------------------------------------------------------

export const session = {
  // The session of the cookie, or null when there is none (401).
  async current() {
    try {
      return await get('/v1/session', { quiet401: true });
    } catch (e) {
      if (e.status === 401) return null;
      throw e;
    }
  },
  login: (token) => post('/v1/session', { token }, { quiet401: true }),
  logout: () => del('/v1/session', { quiet401: true }),
};

// --- Live job updates --------------------------------------------------------
//
// One EventSource (/v1/events) serves every page that shows jobs: each
// `event: job` carries a job's JSON, as GET /v1/jobs/{id} gives it, and
// `event: reset` (a reconnect the server cannot resume, after it
// restarted) means "read your lists again". While the stream is down the
// watchers are asked to refetch every 3 s instead. The browser reconnects
// by itself with Last-Event-ID, so nothing is missed; a stream the server
// refused (an error answer) is tried again every 30 s. Once it is open
// again the polling stops, after one last refetch.

const watchers = new Set();
let source = null;
let pollTimer = null;
let retryTimer = null;
let mode = 'connecting'; // 'live' | 'polling' | 'connecting'

const POLL_MS = 3000;
const RETRY_MS = 30000;

function setMode(m) {
  mode = m;
  for (const w of watchers) w.onMode && w.onMode(m);
}

function poll() {
  for (const w of watchers) w.onPoll && w.onPoll();
}

function startPolling() {
  if (pollTimer) return;
  poll();
  pollTimer = setInterval(poll, POLL_MS);
  setMode('polling');
}

function stopPolling() {
  if (!pollTimer) return;
  clearInterval(pollTimer);
  pollTimer = null;
  poll();
}

function openStream() {
  if (source) return;
  if (typeof EventSource === 'undefined') {
    startPolling();
    return;
  }
  const es = new EventSource('/v1/events');
  source = es;
  es.addEventListener('open', () => {
    stopPolling();
    setMode('live');
  });
  es.addEventListener('job', (e) => {
    let job;
    try {
      job = JSON.parse(e.data);
    } catch {
      return;
    }
    for (const w of watchers) w.onJob && w.onJob(job);
  });
  es.addEventListener('reset', poll);
  es.addEventListener('error', () => {
    startPolling();
    if (es.readyState !== EventSource.CLOSED) return; // the browser reconnects
    if (source === es) source = null;
    if (!retryTimer) {
      retryTimer = setTimeout(() => {
        retryTimer = null;
        if (watchers.size) openStream();
      }, RETRY_MS);
    }
  });
}

function closeAll() {
  if (source) source.close();
  source = null;
  clearInterval(pollTimer);
  pollTimer = null;
  clearTimeout(retryTimer);
  retryTimer = null;
  mode = 'connecting';
}

// Calls onJob(job) for every change to one of the caller's jobs, onPoll()
// every 3 s while the stream is down, onMode(mode) when that changes.
// Returns the function that stops watching.
export function watchJobs(watcher) {
  watchers.add(watcher);
  if (watcher.onMode) watcher.onMode(mode);
  openStream();
  return () => {
    watchers.delete(watcher);
    if (!watchers.size) closeAll();
  };
}

// Closes the stream at logout, whoever still watches.
export function stopWatching() {
  watchers.clear();
  closeAll();
}

// --- Streamed text -----------------------------------------------------------

// Reads a text/plain answer as it arrives (a followed log), calling
// onText(chunk) for each piece. Resolves when the server ends the stream;
// rejects with AbortError when `signal` aborts it, ApiError on an error answer.
export async function streamText(path, onText, signal) {
  const res = await request('GET', path, { raw: true, signal, headers: { Accept: 'text/plain' } });
  if (!res.body) {
    onText(await res.text());
    return;
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const text = decoder.decode(value, { stream: true });
      if (text) onText(text);
    }
    const tail = decoder.decode();
    if (tail) onText(tail);
  } finally {
    reader.releaseLock();
  }
}
