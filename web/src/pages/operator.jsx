// The operator's page (admin sessions only): queue pressure by GPU type
// (GET /v1/queue), every node with drain and undrain, prices, minting
// credit cards (the codes are shown once), users with their fair-share
// standings and weights, and the ledger check.
import { useEffect, useState } from 'preact/hooks';
import { get, post, put } from '../api.js';
import { credits, dateTime, relative, shortDuration } from '../format.js';
import { ConfirmButton, CopyButton, ErrorNote, Field, Loading, useAsync, useInterval } from '../ui.jsx';
import { GpuTable } from './provider.jsx';

const REFRESH_MS = 5000;

function Queue() {
  const { data, error, reload } = useAsync(() => get('/v1/queue?limit=1'), []);
  useInterval(reload, REFRESH_MS);
  const groups = (data && data.by_gpu_type) || [];
  return (
    <section class="panel" aria-labelledby="queue-title">
      <h2 id="queue-title">Queue</h2>
      <ErrorNote error={error} />
      {data && (
        <p data-testid="queue-gpus">
          {data.free_gpus} of {data.total_gpus} GPUs free
          {data.estimated_at ? <span class="muted"> · estimated {relative(data.estimated_at)}</span> : ''}
        </p>
      )}
      {data && !groups.length && <p class="muted">Nothing waits or runs.</p>}
      {groups.length > 0 && (
        <div class="table-wrap">
          <table data-testid="queue-table">
            <thead>
              <tr>
                <th scope="col">GPU type asked for</th>
                <th scope="col" class="num">
                  Waiting jobs
                </th>
                <th scope="col" class="num">
                  Waiting GPUs
                </th>
                <th scope="col" class="num">
                  Running jobs
                </th>
                <th scope="col" class="num">
                  Running GPUs
                </th>
                <th scope="col" class="num">
                  Expected wait
                </th>
              </tr>
            </thead>
            <tbody>
              {groups.map((g) => (
                <tr key={g.gpu_type} data-testid="queue-row" data-gpu-type={g.gpu_type}>
                  <td>{g.gpu_type}</td>
                  <td class="num">{g.pending_jobs}</td>
                  <td class="num">{g.pending_gpus}</td>
                  <td class="num">{g.running_jobs}</td>
                  <td class="num">{g.running_gpus}</td>
                  <td class="num">
                    {g.expected_wait_s === null || g.expected_wait_s === undefined
                      ? '—'
                      : shortDuration(g.expected_wait_s)}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function Nodes() {
  const { data, error, reload, setData } = useAsync(() => get('/v1/nodes'), []);
  const [actionError, setActionError] = useState(null);
  const [evict, setEvict] = useState({});
  useInterval(reload, REFRESH_MS);
  const nodes = (data && data.nodes) || [];
  const act = async (node, what) => {
    setActionError(null);
    try {
      const q = what === 'drain' && evict[node.id] ? '?evict=true' : '';
      const updated = await post(`/v1/admin/nodes/${encodeURIComponent(node.id)}/${what}${q}`);
      setData((d) => ({ ...d, nodes: d.nodes.map((n) => (n.id === node.id ? { ...n, ...updated } : n)) }));
    } catch (e) {
      setActionError(e);
    }
  };
  return (
    <section class="panel" aria-labelledby="op-nodes-title">
      <h2 id="op-nodes-title">Nodes</h2>
      <ErrorNote error={error} />
      <ErrorNote error={actionError} />
      {!data && !error && <Loading />}
      {data && !nodes.length && (
        <p class="muted">
          No node has joined. <code>tide admin join-token</code> prints the command for a GPU machine.
        </p>
      )}
      <div class="nodes">
        {nodes.map((n) => {
          const state = n.state !== 'ready' ? n.state : n.draining ? 'draining' : 'ready';
          return (
            <article
              key={n.id}
              class="node"
              data-testid="operator-node"
              data-node-id={n.id}
              aria-labelledby={`op-node-${n.id}`}
            >
              <div class="panel-head">
                <h3 id={`op-node-${n.id}`}>
                  {n.name} <span class="mono muted">{n.id}</span>
                </h3>
                <div class="controls">
                  <span class={`status status-${state}`} data-testid="node-state">
                    {state}
                  </span>
                  {n.draining ? (
                    <button type="button" onClick={() => act(n, 'undrain')} data-testid="node-undrain">
                      Undrain
                    </button>
                  ) : (
                    <>
                      <label class="check">
                        <input
                          type="checkbox"
                          checked={!!evict[n.id]}
                          onChange={(e) => setEvict({ ...evict, [n.id]: e.currentTarget.checked })}
                          data-testid="node-evict"
                        />
                        evict its jobs
                      </label>
                      <ConfirmButton
                        label="Drain"
                        question={
                          evict[n.id]
                            ? `Drain ${n.name} and requeue its jobs?`
                            : `Drain ${n.name}? Its running jobs finish there.`
                        }
                        yes="Drain"
                        no="Keep"
                        onConfirm={() => act(n, 'drain')}
                        testid="node-drain"
                      />
                    </>
                  )}
                </div>
              </div>
              <p class="muted">
                {n.hostname} · {n.free_gpus} of {(n.gpus || []).length} GPUs free · {n.running_jobs} jobs ·
                heartbeat {relative(n.last_heartbeat)}
                {n.owner ? ` · provider ${n.owner}` : " · the operator's own"}
              </p>
              <GpuTable node={n} />
            </article>
          );
        })}
      </div>
    </section>
  );
}

function Prices() {
  const { data, error, setData } = useAsync(() => get('/v1/admin/prices'), []);
  const [v, setV] = useState({ model: '', price: '' });
  const [fees, setFees] = useState(null);
  const [formError, setFormError] = useState(null);
  useEffect(() => {
    if (data && !fees)
      setFees({ spot_discount: String(data.spot_discount ?? ''), fee: String(data.fee ?? '') });
  }, [data]);
  const send = async (body) => {
    setFormError(null);
    try {
      setData(await post('/v1/admin/prices', body));
      return true;
    } catch (e) {
      setFormError(e);
      return false;
    }
  };
  const setPrice = async (e) => {
    e.preventDefault();
    if (await send({ per_gpu_hour: { [v.model.trim()]: v.price.trim() } })) setV({ model: '', price: '' });
  };
  const setFractions = (e) => {
    e.preventDefault();
    send({ spot_discount: fees.spot_discount.trim(), fee: fees.fee.trim() });
  };
  const at = (f) => (formError && formError.field && formError.field.startsWith(f) ? formError.message : '');
  const prices = Object.entries((data && data.per_gpu_hour) || {});
  return (
    <section class="panel" aria-labelledby="prices-title">
      <h2 id="prices-title">Prices</h2>
      <ErrorNote error={error} />
      {formError && !at('per_gpu_hour') && !at('spot_discount') && !at('fee') && (
        <ErrorNote error={formError} />
      )}
      {prices.length > 0 && (
        <table class="compact" data-testid="prices-table">
          <thead>
            <tr>
              <th scope="col">Model</th>
              <th scope="col" class="num">
                Per GPU-hour
              </th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {prices.map(([model, price]) => (
              <tr key={model} data-testid="price-row" data-model={model}>
                <td>{model}</td>
                <td class="num">{credits(price)}</td>
                <td>
                  <ConfirmButton
                    label="Remove"
                    question={`Remove the price of ${model}?`}
                    yes="Remove"
                    no="Keep"
                    onConfirm={() => send({ per_gpu_hour: { [model]: null } })}
                    testid="price-remove"
                    small
                  />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <form class="row-form" onSubmit={setPrice} data-testid="price-form">
        <Field label="GPU model" name="model" id="price-model" error={at('per_gpu_hour')}>
          {(a) => (
            <input
              {...a}
              value={v.model}
              onInput={(e) => setV({ ...v, model: e.currentTarget.value })}
              placeholder="H100"
              data-testid="price-model"
            />
          )}
        </Field>
        <Field label="Credits per GPU-hour" name="price" id="price-value">
          {(a) => (
            <input
              {...a}
              value={v.price}
              inputMode="decimal"
              onInput={(e) => setV({ ...v, price: e.currentTarget.value })}
              placeholder="2.5"
              data-testid="price-value"
            />
          )}
        </Field>
        <button type="submit" disabled={!v.model.trim() || !v.price.trim()} data-testid="price-set">
          Set price
        </button>
      </form>
      {fees && (
        <form class="row-form" onSubmit={setFractions} data-testid="fees-form">
          <Field
            label="Spot discount"
            name="spot_discount"
            id="price-spot"
            error={at('spot_discount')}
            hint="0.6: spot jobs pay 40% of the price"
          >
            {(a) => (
              <input
                {...a}
                value={fees.spot_discount}
                inputMode="decimal"
                onInput={(e) => setFees({ ...fees, spot_discount: e.currentTarget.value })}
              />
            )}
          </Field>
          <Field
            label="Fee"
            name="fee"
            id="price-fee"
            error={at('fee')}
            hint="the platform's share of what providers earn"
          >
            {(a) => (
              <input
                {...a}
                value={fees.fee}
                inputMode="decimal"
                onInput={(e) => setFees({ ...fees, fee: e.currentTarget.value })}
              />
            )}
          </Field>
          <button type="submit">Save</button>
        </form>
      )}
    </section>
  );
}

function MintCards() {
  const [v, setV] = useState({ count: '1', value: '', expires: '' });
  const [error, setError] = useState(null);
  const [minted, setMinted] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setMinted(null);
    const body = { count: Number(v.count), value: v.value.trim() };
    if (v.expires) {
      const end = new Date(`${v.expires}T23:59:59`);
      body.expires_at = end.getTime();
    }
    try {
      setMinted(await post('/v1/admin/cards', body));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const at = (f) => (error && error.field === f ? error.message : '');
  const codes = (minted && minted.codes) || [];
  return (
    <section class="panel" aria-labelledby="mint-title">
      <h2 id="mint-title">Mint credit cards</h2>
      <form class="row-form" onSubmit={submit} data-testid="mint-form">
        <Field label="How many" name="count" id="mint-count" error={at('count')}>
          {(a) => (
            <input
              {...a}
              type="number"
              min={1}
              max={10000}
              value={v.count}
              onInput={(e) => setV({ ...v, count: e.currentTarget.value })}
              data-testid="mint-count"
            />
          )}
        </Field>
        <Field label="Credits each" name="value" id="mint-value" error={at('value')}>
          {(a) => (
            <input
              {...a}
              inputMode="decimal"
              value={v.value}
              onInput={(e) => setV({ ...v, value: e.currentTarget.value })}
              placeholder="25"
              data-testid="mint-value"
            />
          )}
        </Field>
        <Field label="Expires (optional)" name="expires_at" id="mint-expires" error={at('expires_at')}>
          {(a) => (
            <input
              {...a}
              type="date"
              value={v.expires}
              onInput={(e) => setV({ ...v, expires: e.currentTarget.value })}
              data-testid="mint-expires"
            />
          )}
        </Field>
        <button type="submit" class="primary" disabled={busy || !v.value.trim()} data-testid="mint-submit">
          Mint
        </button>
      </form>
      {error && !['count', 'value', 'expires_at'].includes(error.field) && (
        <ErrorNote error={error} testid="mint-error" />
      )}
      {codes.length > 0 && (
        <div class="secret" role="status" data-testid="minted">
          <p>
            {codes.length} card{codes.length === 1 ? '' : 's'} of {credits(minted.value)} credits
            {minted.expires_at ? `, valid until ${dateTime(minted.expires_at)}` : ''}. The codes are shown
            only now:
          </p>
          <ul class="codes" data-testid="minted-codes">
            {codes.map((c) => (
              <li key={c}>
                <code data-testid="minted-code">{c}</code>
              </li>
            ))}
          </ul>
          <CopyButton
            text={codes.join('\n')}
            label={codes.length === 1 ? 'Copy the code' : 'Copy all codes'}
            testid="minted-copy"
          />
        </div>
      )}
    </section>
  );
}

// One user's weight, set in place. The field keeps what the operator
// typed; the table's refresh does not overwrite it.
function WeightCell({ user, onSaved }) {
  const [value, setValue] = useState(String(user.weight));
  const [error, setError] = useState(null);
  const save = async (e) => {
    e.preventDefault();
    setError(null);
    try {
      await put(`/v1/admin/users/${encodeURIComponent(user.id)}/weight`, { weight: Number(value) });
      onSaved();
    } catch (err) {
      setError(err);
    }
  };
  const changed = value.trim() !== String(user.weight);
  return (
    <form class="inline-form" onSubmit={save} data-testid="weight-form">
      <input
        class="narrow"
        inputMode="decimal"
        value={value}
        onInput={(e) => setValue(e.currentTarget.value)}
        aria-label={`Fair-share weight of ${user.name}`}
        aria-invalid={error ? 'true' : undefined}
        data-testid="weight-value"
      />
      <button type="submit" disabled={!changed || !value.trim()} data-testid="weight-set">
        Set
      </button>
      {error && (
        <span class="field-error" role="alert" data-testid="weight-error">
          {error.message}
        </span>
      )}
    </form>
  );
}

const pct = (x) => `${(100 * (x || 0)).toFixed(1)}%`;
// Decayed usage: GPU-hours, or GPU-seconds while under a hundredth of one.
const gpuTime = (s) => (s >= 36 ? `${(s / 3600).toFixed(2)} GPU-h` : `${s.toFixed(1)} GPU-s`);

// Every user as the scheduler weighs them (GET /v1/admin/users, like
// Slurm's sshare): weight, the share it entitles them to among users with
// work, their decayed usage, and the order in which those waiting are
// served; and the money they hold.
function Standings({ refresh }) {
  const { data, error, reload } = useAsync(() => get('/v1/admin/users'), [refresh]);
  useInterval(reload, REFRESH_MS);
  const users = (data && data.users) || [];
  return (
    <>
      <ErrorNote error={error} />
      {!data && !error && <Loading />}
      {data && !users.length && <p class="empty">No users yet.</p>}
      {users.length > 0 && (
        <div class="table-wrap">
          <table data-testid="users-table">
            <thead>
              <tr>
                <th scope="col">User</th>
                <th scope="col">Weight</th>
                <th scope="col" class="num" title="weight over the weights of users with work">
                  Share
                </th>
                <th scope="col" class="num" title="decayed GPU-hours">
                  Usage
                </th>
                <th scope="col" class="num" title="of every user's usage">
                  Of all usage
                </th>
                <th scope="col" class="num">
                  Running
                </th>
                <th scope="col" class="num">
                  Queued
                </th>
                <th scope="col" class="num" title="the order in which users with queued work are served">
                  Next
                </th>
                <th scope="col" class="num">
                  Balance
                </th>
                <th scope="col" class="num">
                  Daily cap
                </th>
              </tr>
            </thead>
            <tbody>
              {users.map((u) => (
                <tr key={u.id} data-testid="user-row" data-user={u.name}>
                  <td>
                    {u.name} <span class="mono muted">{u.id}</span>
                  </td>
                  <td>
                    <WeightCell user={u} onSaved={reload} />
                  </td>
                  <td class="num" data-testid="user-share">
                    {u.running_jobs + u.queued_jobs > 0 ? pct(u.share) : '—'}
                  </td>
                  <td class="num">{gpuTime(u.usage_gpu_s)}</td>
                  <td class="num">{pct(u.usage_share)}</td>
                  <td class="num">
                    {u.running_jobs} ({u.running_gpus} GPUs)
                  </td>
                  <td class="num">
                    {u.queued_jobs} ({u.queued_gpus} GPUs)
                  </td>
                  <td class="num" data-testid="user-rank">
                    {u.rank || '—'}
                  </td>
                  <td class="num">{credits(u.balance)}</td>
                  <td class="num">{u.daily_cap === null ? 'none' : credits(u.daily_cap)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {data && (
        <p class="muted">
          Usage decays with a half-life of {shortDuration(data.half_life_s)}. Between users whose next jobs are
          alike, the lowest usage for its weight goes first, counting each GPU held now as an hour of it.
        </p>
      )}
    </>
  );
}

function Users() {
  const [name, setName] = useState('');
  const [made, setMade] = useState(null);
  const [error, setError] = useState(null);
  const [refresh, setRefresh] = useState(0);

  const create = async (e) => {
    e.preventDefault();
    setError(null);
    setMade(null);
    try {
      setMade(await post('/v1/admin/users', { name: name.trim() }));
      setName('');
      setRefresh((n) => n + 1);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <section class="panel" aria-labelledby="users-title">
      <h2 id="users-title">Users and fair share</h2>
      <Standings refresh={refresh} />
      <h3>New user</h3>
      <form class="row-form" onSubmit={create} data-testid="user-form">
        <Field
          label="New user's name"
          name="name"
          id="user-name"
          error={error && error.field === 'name' ? error.message : ''}
        >
          {(a) => (
            <input
              {...a}
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
              placeholder="alice"
              data-testid="user-name"
            />
          )}
        </Field>
        <button type="submit" class="primary" disabled={!name.trim()} data-testid="user-create">
          Create user
        </button>
      </form>
      {error && error.field !== 'name' && <ErrorNote error={error} testid="user-error" />}
      {made && (
        <div class="secret" role="status" data-testid="user-created">
          <p>
            User <strong>{made.name}</strong> <span class="mono">{made.id}</span>. Their API token is shown
            only now:
          </p>
          <p class="secret-row">
            <code data-testid="user-token">{made.token}</code>
            <CopyButton text={made.token} testid="user-token-copy" />
          </p>
        </div>
      )}
    </section>
  );
}

function LedgerCheck() {
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const check = async () => {
    setBusy(true);
    setError(null);
    try {
      setResult(await get('/v1/admin/ledger/check'));
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <section class="panel" aria-labelledby="ledger-title">
      <h2 id="ledger-title">Ledger</h2>
      <button type="button" onClick={check} disabled={busy} data-testid="ledger-check">
        {busy ? 'Checking…' : 'Check the ledger'}
      </button>
      <ErrorNote error={error} />
      {result && (
        <div data-testid="ledger-result" data-ok={result.ok ? 'true' : 'false'}>
          <p class={result.ok ? 'ok' : 'error'} role="status">
            {result.ok ? 'The ledger balances.' : `The ledger does not balance: ${result.error}`}
          </p>
          <dl class="facts inline">
            {['issued', 'users', 'escrow', 'providers', 'platform'].map((k) => (
              <div key={k}>
                <dt>{k}</dt>
                <dd>{credits(result[k])}</dd>
              </div>
            ))}
          </dl>
        </div>
      )}
    </section>
  );
}

export function OperatorPage({ session }) {
  useEffect(() => {
    document.title = 'Operator · Tide';
  }, []);
  if (session.kind !== 'admin') {
    return (
      <>
        <h1>Operator</h1>
        <p data-testid="operator-denied">This page is for the operator: log in with the admin token.</p>
      </>
    );
  }
  return (
    <>
      <h1>Operator</h1>
      <Queue />
      <Nodes />
      <div class="grid2 top">
        <Prices />
        <MintCards />
      </div>
      <Users />
      <LedgerCheck />
    </>
  );
}
