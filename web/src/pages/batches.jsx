// Batches (docs/batches.md): the list with each batch's progress, and one
// batch's page with its trials (GET /v1/batches/{id}/results) in a table
// sortable by any parameter or final metric, a scatter of a parameter
// against a metric, and cancel.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { get, post, watchJobs } from '../api.js';
import { ScatterChart } from '../charts.jsx';
import { credits, dateTime, isEnded, relative } from '../format.js';
import { Link } from '../router.js';
import {
  ConfirmButton,
  ErrorNote,
  Loading,
  SortHeader,
  StatusBadge,
  sortRows,
  useAsync,
  useInterval,
} from '../ui.jsx';

const REFRESH_MS = 10000;
const TRIALS_PAGE = 100;
const ENDED = ['completed', 'failed', 'cancelled'];

function trialCount(b) {
  if (typeof b.trials === 'number') return b.trials;
  if (Array.isArray(b.trials)) return b.trials.length;
  return Object.values(b.counts || {}).reduce((a, n) => a + n, 0);
}

function Progress({ batch }) {
  const counts = batch.counts || {};
  const total = trialCount(batch);
  const done = ENDED.reduce((a, s) => a + (counts[s] || 0), 0);
  const parts = ['queued', 'starting', 'running', 'completed', 'failed', 'cancelled']
    .filter((s) => counts[s])
    .map((s) => `${counts[s]} ${s}`);
  return (
    <div class="progress" data-testid="batch-progress">
      <progress max={total || 1} value={done} aria-label={`${done} of ${total} trials ended`} />
      <span>
        {done}/{total} ended{parts.length ? ` · ${parts.join(', ')}` : ''}
      </span>
    </div>
  );
}

// Re-reads `reload` when a job of one of these batches changes (at most
// every 2 s), or every 3 s while the event stream is down.
function useBatchEvents(reload, belongs) {
  const r = useRef({ timer: null });
  r.current.reload = reload;
  r.current.belongs = belongs;
  useEffect(() => {
    const s = r.current;
    const stop = watchJobs({
      onJob: (job) => {
        if (!job.batch || !s.belongs(job.batch) || s.timer) return;
        s.timer = setTimeout(() => {
          s.timer = null;
          s.reload();
        }, 2000);
      },
      onPoll: () => s.reload(),
    });
    return () => {
      stop();
      clearTimeout(s.timer);
    };
  }, []);
}

export function BatchesPage() {
  const { data, error, reload } = useAsync(() => get('/v1/batches'), []);
  const batches = (data && data.batches) || [];
  useBatchEvents(reload, () => true);
  useEffect(() => {
    document.title = 'Batches · Tide';
  }, []);
  return (
    <>
      <h1>Batches</h1>
      <ErrorNote error={error} />
      {!data && !error && <Loading />}
      {data && !batches.length && (
        <p class="empty" data-testid="batches-empty">
          No batches yet. <code>tide batch submit sweep.yaml</code> or{' '}
          <code>tide sbatch --array=0-9 train.sh</code> makes one, and so does a JSON batch file under{' '}
          <Link href="/new">New job</Link>.
        </p>
      )}
      {batches.length > 0 && (
        <div class="table-wrap">
          <table data-testid="batches-table">
            <thead>
              <tr>
                <th scope="col">ID</th>
                <th scope="col">Experiment</th>
                <th scope="col">Status</th>
                <th scope="col">Progress</th>
                <th scope="col" class="num">
                  Cost
                </th>
                <th scope="col">Created</th>
              </tr>
            </thead>
            <tbody>
              {batches.map((b) => (
                <tr key={b.id} data-testid="batch-row" data-batch-id={b.id}>
                  <td class="mono">
                    <Link href={`/batches/${encodeURIComponent(b.id)}`}>{b.id}</Link>
                  </td>
                  <td>{b.experiment_batch || <span class="muted">—</span>}</td>
                  <td>
                    <StatusBadge status={b.status} />
                  </td>
                  <td>
                    <Progress batch={b} />
                  </td>
                  <td class="num">{credits(b.cost)}</td>
                  <td title={dateTime(b.created_at)}>{relative(b.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function cellValue(v) {
  if (v === undefined || v === null) return '';
  if (typeof v === 'number') return +v.toPrecision(6);
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

function Trials({ results }) {
  const params = useMemo(
    () => [...new Set(results.flatMap((r) => Object.keys(r.params || {})))].sort(),
    [results],
  );
  const metrics = useMemo(
    () =>
      [...new Set(results.flatMap((r) => Object.keys(r.metrics || {})))]
        .filter((k) => k !== 'attempt')
        .sort(),
    [results],
  );
  const [sort, setSort] = useState({ key: 'file', dir: 'ascending' });
  const [page, setPage] = useState(0);

  const columns = [
    { key: 'id', label: 'Trial', get: (r) => r.id },
    { key: 'status', label: 'Status', get: (r) => r.status },
    ...params.map((p) => ({
      key: `param.${p}`,
      label: p,
      get: (r) => (r.params || {})[p],
      kind: 'param',
      numeric: true,
    })),
    ...metrics.map((m) => ({
      key: `metric.${m}`,
      label: m,
      get: (r) => (r.metrics || {})[m],
      kind: 'metric',
      numeric: true,
    })),
    { key: 'attempts', label: 'Attempts', get: (r) => r.attempts, numeric: true },
    { key: 'cost', label: 'Cost', get: (r) => r.cost, numeric: true },
  ];
  const sorted = useMemo(() => {
    const col = columns.find((c) => c.key === sort.key);
    return col ? sortRows(results, col.get, sort.dir) : results;
  }, [results, sort, params.join(), metrics.join()]);
  const pages = Math.max(1, Math.ceil(sorted.length / TRIALS_PAGE));
  const p = Math.min(page, pages - 1);
  const shown = sorted.slice(p * TRIALS_PAGE, (p + 1) * TRIALS_PAGE);
  const changeSort = (s) => {
    setSort(s);
    setPage(0);
  };

  return (
    <>
      <TrialScatter results={results} params={params} metrics={metrics} />
      <section class="panel" aria-labelledby="trials-title">
        <div class="panel-head">
          <h2 id="trials-title">Trials</h2>
          {pages > 1 && (
            <div class="pager">
              <span>
                {p * TRIALS_PAGE + 1}–{p * TRIALS_PAGE + shown.length} of {sorted.length}
              </span>
              <button
                type="button"
                disabled={p === 0}
                onClick={() => setPage(p - 1)}
                data-testid="trials-prev"
              >
                Previous
              </button>
              <button
                type="button"
                disabled={p >= pages - 1}
                onClick={() => setPage(p + 1)}
                data-testid="trials-next"
              >
                Next
              </button>
            </div>
          )}
        </div>
        <div class="table-wrap">
          <table data-testid="trials-table">
            <thead>
              <tr>
                {columns.map((c) => (
                  <SortHeader
                    key={c.key}
                    label={c.kind ? <span class={`col-${c.kind}`}>{c.label}</span> : c.label}
                    sortKey={c.key}
                    sort={sort}
                    setSort={changeSort}
                    numeric={c.numeric}
                  />
                ))}
              </tr>
            </thead>
            <tbody>
              {shown.map((r) => (
                <tr key={r.job || r.id} data-testid="trial-row" data-trial-id={r.id}>
                  <td>
                    <Link href={`/jobs/${encodeURIComponent(r.job)}`}>{r.id}</Link>
                  </td>
                  <td>
                    <StatusBadge status={r.status} />
                    {r.reason && <span class="muted"> {r.reason}</span>}
                  </td>
                  {params.map((k) => (
                    <td key={k} class="num">
                      {cellValue((r.params || {})[k])}
                    </td>
                  ))}
                  {metrics.map((k) => (
                    <td key={k} class="num">
                      {cellValue((r.metrics || {})[k])}
                    </td>
                  ))}
                  <td class="num">
                    {r.attempts}
                    {r.retries ? ` (${r.retries} retried)` : ''}
                  </td>
                  <td class="num">{credits(r.cost)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </section>
    </>
  );
}

function TrialScatter({ results, params, metrics }) {
  const numeric = (get) => results.some((r) => typeof get(r) === 'number');
  const xs = params.filter((p) => numeric((r) => (r.params || {})[p]));
  const ys = metrics.filter((m) => numeric((r) => (r.metrics || {})[m]));
  const [x, setX] = useState('');
  const [y, setY] = useState('');
  const [logX, setLogX] = useState(false);
  const px = xs.includes(x) ? x : xs[0];
  const py = ys.includes(y) ? y : ys[0];
  const points = useMemo(
    () =>
      results
        .map((r) => ({ x: (r.params || {})[px], y: (r.metrics || {})[py] }))
        .filter((p) => typeof p.x === 'number' && typeof p.y === 'number'),
    [results, px, py],
  );
  if (!xs.length || !ys.length) return null;
  return (
    <section class="panel" aria-labelledby="scatter-title">
      <div class="panel-head">
        <h2 id="scatter-title">Parameter against metric</h2>
        <div class="controls">
          <label for="scatter-x">Parameter</label>
          <select
            id="scatter-x"
            value={px}
            onChange={(e) => setX(e.currentTarget.value)}
            data-testid="scatter-param"
          >
            {xs.map((p) => (
              <option key={p}>{p}</option>
            ))}
          </select>
          <label for="scatter-y">Metric</label>
          <select
            id="scatter-y"
            value={py}
            onChange={(e) => setY(e.currentTarget.value)}
            data-testid="scatter-metric"
          >
            {ys.map((m) => (
              <option key={m}>{m}</option>
            ))}
          </select>
          <label class="check">
            <input type="checkbox" checked={logX} onChange={(e) => setLogX(e.currentTarget.checked)} />
            Log scale
          </label>
        </div>
      </div>
      <ScatterChart
        label={`${py} by ${px} (${points.length} trials)`}
        points={points}
        xLabel={px}
        yLabel={py}
        logX={logX}
        testid="batch-scatter"
      />
    </section>
  );
}

export function BatchPage({ params }) {
  const id = params.id;
  const base = `/v1/batches/${encodeURIComponent(id)}`;
  const batch = useAsync(() => get(base), [id]);
  const results = useAsync(() => get(`${base}/results`), [id]);
  const [actionError, setActionError] = useState(null);
  const b = batch.data;
  const running = b && !isEnded(b.status);
  const reload = () => {
    batch.reload();
    results.reload();
  };
  useBatchEvents(reload, (bid) => bid === id);
  useInterval(reload, REFRESH_MS, !!running);
  useEffect(() => {
    document.title = `${(b && b.experiment_batch) || id} · Tide`;
  }, [b && b.experiment_batch]);

  if (batch.error && batch.error.status === 404 && !b) {
    return (
      <div data-testid="batch-not-found">
        <h1>Batch not found</h1>
        <p>
          <Link href="/batches">Back to your batches</Link>
        </p>
      </div>
    );
  }
  if (!b) return batch.error ? <ErrorNote error={batch.error} /> : <Loading what="Loading the batch" />;

  const cancel = async () => {
    setActionError(null);
    try {
      batch.setData(await post(`${base}/cancel`));
      results.reload();
    } catch (e) {
      setActionError(e);
    }
  };

  return (
    <>
      <div class="page-head">
        <div>
          <p class="crumbs">
            <Link href="/batches">Batches</Link> / <span class="mono">{b.id}</span>
          </p>
          <h1>{b.experiment_batch || b.id}</h1>
        </div>
        <div class="actions">
          {running && !b.cancel_requested && (
            <ConfirmButton
              label="Cancel batch"
              question="Cancel every trial that has not ended?"
              yes="Yes, cancel"
              no="Keep it"
              onConfirm={cancel}
              testid="cancel-batch"
            />
          )}
        </div>
      </div>
      <ErrorNote error={actionError} />
      <dl class="facts">
        <div>
          <dt>Status</dt>
          <dd>
            <StatusBadge status={b.status} testid="batch-status" />
          </dd>
        </div>
        <div>
          <dt>Progress</dt>
          <dd>
            <Progress batch={b} />
          </dd>
        </div>
        <div>
          <dt>Cost</dt>
          <dd data-testid="batch-cost">{credits(b.cost)}</dd>
        </div>
        <div>
          <dt>Escrow</dt>
          <dd>{credits(b.escrow)}</dd>
        </div>
        <div>
          <dt>Budget</dt>
          <dd>{b.budget ? credits(b.budget) : 'none'}</dd>
        </div>
        <div>
          <dt>At once</dt>
          <dd>{b.max_concurrent ? `at most ${b.max_concurrent} trials` : 'no cap'}</dd>
        </div>
        <div>
          <dt>Retries</dt>
          <dd>{b.retry_times || 0} per trial</dd>
        </div>
        <div>
          <dt>Created</dt>
          <dd>{dateTime(b.created_at)}</dd>
        </div>
        {b.finished_at > 0 && (
          <div>
            <dt>Finished</dt>
            <dd>{dateTime(b.finished_at)}</dd>
          </div>
        )}
      </dl>
      <ErrorNote error={results.error} />
      {results.data ? (
        <Trials results={results.data.results || []} />
      ) : (
        !results.error && <Loading what="Loading the trials" />
      )}
    </>
  );
}
