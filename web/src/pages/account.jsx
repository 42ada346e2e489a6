// The account page: balance (GET /v1/account), redeeming a card, usage
// (GET /v1/usage) as cost per day and a table, and API tokens (list,
// create with a scope and expiry, revoke). A new token's secret is shown
// once, here, and never again.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { del, get, post, withQuery } from '../api.js';
import { DailyBars } from '../charts.jsx';
import { credits, dateTime, relative, shortDuration } from '../format.js';
import { Link } from '../router.js';
import { ConfirmButton, CopyButton, ErrorNote, Field, Loading, useAsync } from '../ui.jsx';

const DAY = 86400000;
const USAGE_ROWS = 100;

function Balance({ account, error }) {
  return (
    <section class="panel" aria-labelledby="balance-title">
      <h2 id="balance-title">Balance</h2>
      <ErrorNote error={error} />
      {account && (
        <dl class="facts big">
          <div>
            <dt>Available</dt>
            <dd data-testid="balance">{credits(account.available)}</dd>
          </div>
          <div>
            <dt>In escrow</dt>
            <dd data-testid="escrow">{credits(account.escrow)}</dd>
          </div>
          <div>
            <dt>Spent today (UTC)</dt>
            <dd data-testid="spent-today">
              {credits(account.spent_today)}
              {account.daily_cap !== null && account.daily_cap !== undefined && (
                <span class="muted"> of {credits(account.daily_cap)}</span>
              )}
            </dd>
          </div>
        </dl>
      )}
      {account && (
        <p class="muted" data-testid="daily-cap">
          {account.daily_cap === null || account.daily_cap === undefined
            ? 'No daily cap: your jobs may spend what your balance holds.'
            : `Daily cap: your jobs may spend ${credits(account.daily_cap)} per UTC day; the operator sets it.`}
        </p>
      )}
      {!account && !error && <Loading />}
    </section>
  );
}

function Redeem({ onRedeemed }) {
  const [code, setCode] = useState('');
  const [error, setError] = useState(null);
  const [result, setResult] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setResult(null);
    try {
      const r = await post('/v1/cards/redeem', { code: code.trim() });
      setResult(r);
      setCode('');
      onRedeemed();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const fieldError = error && error.field === 'code' ? error.message : '';
  return (
    <section class="panel" aria-labelledby="redeem-title">
      <h2 id="redeem-title">Redeem a card</h2>
      <form class="row-form" onSubmit={submit} data-testid="redeem-form">
        <Field label="Card code" name="code" error={fieldError} id="redeem-code">
          {(a) => (
            <input
              {...a}
              class="mono"
              value={code}
              onInput={(e) => setCode(e.currentTarget.value)}
              placeholder="TIDE-…"
              autocomplete="off"
              spellcheck={false}
              data-testid="redeem-code"
            />
          )}
        </Field>
        <button type="submit" class="primary" disabled={busy || !code.trim()} data-testid="redeem-submit">
          Redeem
        </button>
      </form>
      {error && !fieldError && <ErrorNote error={error} testid="redeem-error" />}
      {result && (
        <p class="ok" role="status" data-testid="redeem-result">
          Credited {credits(result.credited)}; {credits(result.available)} available.
        </p>
      )}
    </section>
  );
}

// Cost per local day: each usage line's cost spread over the days its
// seconds fell on (a running line up to now).
export function costPerDay(lines, since, now = Date.now()) {
  const start = new Date(since);
  start.setHours(0, 0, 0, 0);
  const days = [];
  for (let d = new Date(start); d.getTime() <= now; d.setDate(d.getDate() + 1)) days.push(d.getTime());
  const values = days.map(() => 0);
  const dayIndex = (t) => {
    let lo = 0;
    let hi = days.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (days[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  for (const l of lines) {
    const cost = Number(l.cost) || 0;
    if (!cost || !days.length) continue;
    const s = Math.max(l.started_at || since, days[0]);
    const e = Math.max(s, l.finished_at || now);
    if (e === s) {
      values[dayIndex(s)] += cost;
      continue;
    }
    for (let i = dayIndex(s); i < days.length; i++) {
      const from = Math.max(s, days[i]);
      const to = i + 1 < days.length ? Math.min(e, days[i + 1]) : e;
      if (to > from) values[i] += (cost * (to - from)) / (e - s);
      if (i + 1 < days.length && days[i + 1] >= e) break;
    }
  }
  return { days, values: values.map((v) => +v.toFixed(6)) };
}

function Usage() {
  const [period, setPeriod] = useState(30);
  const since = useMemo(() => Date.now() - period * DAY, [period]);
  const { data, error } = useAsync(() => get(withQuery('/v1/usage', { since })), [since]);
  const lines = (data && data.lines) || [];
  const perDay = useMemo(() => costPerDay(lines, since), [data]);
  const newest = useMemo(
    () => [...lines].sort((a, b) => (b.started_at || 0) - (a.started_at || 0)).slice(0, USAGE_ROWS),
    [data],
  );
  return (
    <section class="panel" aria-labelledby="usage-title">
      <div class="panel-head">
        <h2 id="usage-title">Usage</h2>
        <div class="controls">
          <label for="usage-period">Period</label>
          <select
            id="usage-period"
            value={period}
            onChange={(e) => setPeriod(Number(e.currentTarget.value))}
            data-testid="usage-period"
          >
            <option value={7}>last 7 days</option>
            <option value={30}>last 30 days</option>
            <option value={90}>last 90 days</option>
          </select>
        </div>
      </div>
      <ErrorNote error={error} />
      {data && (
        <p>
          Total: <strong data-testid="usage-total">{credits(data.total)}</strong> credits over {lines.length}{' '}
          attempt{lines.length === 1 ? '' : 's'}.
        </p>
      )}
      {data && (
        <DailyBars
          label="Cost per day (credits)"
          days={perDay.days}
          values={perDay.values}
          unit="credits"
          testid="chart-cost-per-day"
        />
      )}
      {lines.length > 0 && (
        <div class="table-wrap scroll" tabIndex={0} role="region" aria-label="Usage by attempt">
          <table data-testid="usage-table">
            <thead>
              <tr>
                <th scope="col">Job</th>
                <th scope="col">Name</th>
                <th scope="col">Attempt</th>
                <th scope="col">GPUs</th>
                <th scope="col">Node</th>
                <th scope="col">Start</th>
                <th scope="col" class="num">
                  Time
                </th>
                <th scope="col" class="num">
                  Rate
                </th>
                <th scope="col" class="num">
                  Cost
                </th>
              </tr>
            </thead>
            <tbody>
              {newest.map((l) => (
                <tr key={`${l.job_id}-${l.attempt}-${l.rank}`} data-testid="usage-row">
                  <td class="mono">
                    <Link href={`/jobs/${encodeURIComponent(l.job_id)}`}>{l.job_id}</Link>
                  </td>
                  <td>{l.name}</td>
                  <td>
                    {l.attempt}
                    {l.rank ? ` · rank ${l.rank}` : ''}
                  </td>
                  <td>
                    {l.gpus} × {l.gpu_model}
                  </td>
                  <td class="mono">{l.node_id}</td>
                  <td>{dateTime(l.started_at)}</td>
                  <td class="num">{shortDuration(l.seconds)}</td>
                  <td class="num">{credits(l.rate)}</td>
                  <td class="num">{credits(l.cost)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {lines.length > USAGE_ROWS && (
        <p class="muted">
          The newest {USAGE_ROWS} of {lines.length} attempts; <code>tide usage</code> lists them all.
        </p>
      )}
    </section>
  );
}

function NewToken({ onCreated }) {
  const [v, setV] = useState({ name: '', scope: 'submit', expires: '30d' });
  const [error, setError] = useState(null);
  const [made, setMade] = useState(null);
  const [busy, setBusy] = useState(false);
  const set = (k) => (e) => setV({ ...v, [k]: e.currentTarget.value });
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setMade(null);
    try {
      const t = await post('/v1/tokens', {
        name: v.name.trim(),
        scope: v.scope,
        expires: v.expires.trim() || 'never',
      });
      setMade(t);
      setV({ ...v, name: '' });
      onCreated();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const at = (f) => (error && error.field === f ? error.message : '');
  return (
    <>
      <form class="row-form" onSubmit={submit} data-testid="token-form">
        <Field label="Name" name="name" error={at('name')} id="token-name">
          {(a) => (
            <input
              {...a}
              value={v.name}
              onInput={set('name')}
              placeholder="ci"
              maxLength={64}
              data-testid="token-name"
            />
          )}
        </Field>
        <Field label="Scope" name="scope" error={at('scope')} id="token-scope">
          {(a) => (
            <select {...a} value={v.scope} onChange={set('scope')} data-testid="token-scope">
              <option value="read">read: look only</option>
              <option value="submit">submit: also submit and cancel</option>
              <option value="full">full: everything</option>
            </select>
          )}
        </Field>
        <Field label="Expires after" name="expires" error={at('expires')} id="token-expires">
          {(a) => (
            <input
              {...a}
              value={v.expires}
              onInput={set('expires')}
              placeholder="30d or never"
              data-testid="token-expires"
            />
          )}
        </Field>
        <button type="submit" class="primary" disabled={busy || !v.name.trim()} data-testid="token-create">
          Create token
        </button>
      </form>
      {error && !['name', 'scope', 'expires'].includes(error.field) && (
        <ErrorNote error={error} testid="token-error" />
      )}
      {made && (
        <div class="secret" role="status" data-testid="token-created">
          <p>
            Token <strong>{made.name}</strong> ({made.scope}). Its secret is shown only now:
          </p>
          <p class="secret-row">
            <code data-testid="token-secret">{made.token}</code>
            <CopyButton text={made.token} testid="token-copy" />
          </p>
        </div>
      )}
    </>
  );
}

function Tokens() {
  const { data, error, reload } = useAsync(() => get('/v1/tokens'), []);
  const [actionError, setActionError] = useState(null);
  const tokens = (data && data.tokens) || [];
  const revoke = async (t) => {
    setActionError(null);
    try {
      await del(`/v1/tokens/${encodeURIComponent(t.id || t.name)}`);
      reload();
    } catch (e) {
      setActionError(e);
    }
  };
  return (
    <section class="panel" aria-labelledby="tokens-title">
      <h2 id="tokens-title">API tokens</h2>
      <ErrorNote error={error && (error.status === 403 ? `${error.message}` : error)} />
      <ErrorNote error={actionError} />
      {tokens.length > 0 && (
        <div class="table-wrap">
          <table data-testid="tokens-table">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Scope</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">Expires</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {tokens.map((t) => (
                <tr key={t.id} data-testid="token-row" data-token-name={t.name}>
                  <td>
                    {t.name}
                    {t.current && <span class="tag">this session</span>}
                  </td>
                  <td>{t.scope}</td>
                  <td>{dateTime(t.created_at)}</td>
                  <td>{t.last_used_at ? relative(t.last_used_at) : 'never'}</td>
                  <td>{t.expires_at ? dateTime(t.expires_at) : 'never'}</td>
                  <td>
                    <ConfirmButton
                      label="Revoke"
                      question={
                        t.current
                          ? 'Revoke the token this session uses? You will be logged out.'
                          : `Revoke ${t.name}?`
                      }
                      yes="Revoke"
                      no="Keep"
                      onConfirm={() => revoke(t)}
                      testid="revoke-token"
                      small
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {!error && <NewToken onCreated={reload} />}
    </section>
  );
}

// Where the user is logged in (GET /v1/sessions): each browser session,
// the token it was made from, and ending one left open elsewhere.
function Sessions() {
  const { data, error, reload } = useAsync(() => get('/v1/sessions'), []);
  const [actionError, setActionError] = useState(null);
  const sessions = (data && data.sessions) || [];
  const end = async (s) => {
    setActionError(null);
    try {
      await del(`/v1/sessions/${encodeURIComponent(s.id)}`);
      reload();
    } catch (e) {
      setActionError(e);
    }
  };
  return (
    <section class="panel" aria-labelledby="sessions-title">
      <h2 id="sessions-title">Sessions</h2>
      <ErrorNote error={error} />
      <ErrorNote error={actionError} />
      {!data && !error && <Loading />}
      {sessions.length > 0 && (
        <div class="table-wrap">
          <table data-testid="sessions-table">
            <thead>
              <tr>
                <th scope="col">Session</th>
                <th scope="col">From token</th>
                <th scope="col">Scope</th>
                <th scope="col">Logged in</th>
                <th scope="col">Last used</th>
                <th scope="col">Ends</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {sessions.map((s) => (
                <tr key={s.id} data-testid="session-row" data-session-id={s.id}>
                  <td class="mono">
                    {s.id}
                    {s.current && <span class="tag">this browser</span>}
                  </td>
                  <td class="mono">{s.token}</td>
                  <td>{s.scope}</td>
                  <td>{dateTime(s.created_at)}</td>
                  <td>{s.last_used_at ? relative(s.last_used_at) : 'never'}</td>
                  <td>{dateTime(s.expires_at)}</td>
                  <td>
                    {!s.current && (
                      <ConfirmButton
                        label="End"
                        question={`Log ${s.id} out?`}
                        yes="End it"
                        no="Keep"
                        onConfirm={() => end(s)}
                        testid="end-session"
                        small
                      />
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <p class="muted">A session lasts 12 hours at most, and ends with the token it was made from.</p>
    </section>
  );
}

export function AccountPage({ session }) {
  const account = useAsync(() => get('/v1/account'), []);
  useEffect(() => {
    document.title = 'Account · Tide';
  }, []);
  return (
    <>
      <h1>Account</h1>
      <p class="muted">
        {session.user} <span class="mono">{session.user_id}</span>
      </p>
      <div class="grid2 top">
        <Balance account={account.data} error={account.error} />
        <Redeem onRedeemed={account.reload} />
      </div>
      <Usage />
      <Tokens />
      <Sessions />
    </>
  );
}
