// The jobs page: the caller's jobs (every user's for the admin), newest
// first, one page of 50 at a time from GET /v1/jobs, filtered and searched
// by the server. The filters live in the address (/jobs?status=running&q=x)
// so a reload or a shared link shows the same list. Rows change in place
// as /v1/events reports their jobs; the first page is fetched again (at
// most every 2 s) so new jobs and the total show up too.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { get, watchJobs, withQuery } from '../api.js';
import { age, credits, dateTime, jobGpus } from '../format.js';
import { Link, navigate, useLocation } from '../router.js';
import { ErrorNote, StatusBadge, useAsync, useNow } from '../ui.jsx';

export const STATUSES = ['queued', 'starting', 'running', 'completed', 'failed', 'cancelled'];
const PAGE = 50;
const REFETCH_MS = 2000;

function readFilters(search) {
  const p = new URLSearchParams(search);
  const list = (k) =>
    (p.get(k) || '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  return {
    status: list('status').filter((s) => STATUSES.includes(s)),
    tag: p.get('tag') || '',
    batch: p.get('batch') || '',
    gpu_type: p.get('gpu_type') || '',
    q: p.get('q') || '',
  };
}

function filtersPath(f) {
  return withQuery('/jobs', { status: f.status, tag: f.tag, batch: f.batch, gpu_type: f.gpu_type, q: f.q });
}

// What a row says after its status: why it waits, or how it ended.
function reasonOf(job) {
  if (job.status === 'queued') return job.pending_reason || '';
  if (job.cancel_requested && job.status !== 'cancelled') return 'cancelling';
  if (job.preempt_requested)
    return job.requeue_reason ? `being requeued (${job.requeue_reason})` : 'being preempted';
  return job.reason || '';
}

export function JobRow({ job, now }) {
  const reason = reasonOf(job);
  return (
    <tr data-testid="job-row" data-job-id={job.id} data-status={job.status}>
      <td class="mono">
        <Link href={`/jobs/${encodeURIComponent(job.id)}`}>{job.id}</Link>
      </td>
      <td class="name" title={job.name}>
        {job.name || <span class="muted">—</span>}
      </td>
      <td>
        <StatusBadge status={job.status} />
      </td>
      <td>{jobGpus(job)}</td>
      <td class="mono">{job.node_id || <span class="muted">—</span>}</td>
      <td title={dateTime(job.created_at)}>{age(job.created_at, now)}</td>
      <td class="num">{credits(job.cost)}</td>
      <td class="reason" title={reason}>
        {reason}
      </td>
    </tr>
  );
}

export function JobsTable({ jobs, now, caption }) {
  return (
    <div class="table-wrap">
      <table class="jobs" data-testid="jobs-table">
        {caption && <caption class="sr-only">{caption}</caption>}
        <thead>
          <tr>
            <th scope="col">ID</th>
            <th scope="col">Name</th>
            <th scope="col">Status</th>
            <th scope="col">GPUs</th>
            <th scope="col">Node</th>
            <th scope="col">Age</th>
            <th scope="col" class="num">
              Cost
            </th>
            <th scope="col">Reason</th>
          </tr>
        </thead>
        <tbody>
          {jobs.map((j) => (
            <JobRow key={j.id} job={j} now={now} />
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Filters({ filters, onChange }) {
  const [q, setQ] = useState(filters.q);
  const [text, setText] = useState({ tag: filters.tag, batch: filters.batch, gpu_type: filters.gpu_type });
  // Back and forward change the filters under the form: show them.
  useEffect(() => setQ(filters.q), [filters.q]);
  useEffect(
    () => setText({ tag: filters.tag, batch: filters.batch, gpu_type: filters.gpu_type }),
    [filters.tag, filters.batch, filters.gpu_type],
  );
  // The search box asks the server once typing pauses.
  useEffect(() => {
    if (q === filters.q) return undefined;
    const t = setTimeout(() => onChange({ ...filters, q }), 300);
    return () => clearTimeout(t);
  }, [q]);

  const toggle = (s) => {
    const status = filters.status.includes(s)
      ? filters.status.filter((x) => x !== s)
      : [...filters.status, s];
    onChange({ ...filters, status: STATUSES.filter((x) => status.includes(x)) });
  };
  const apply = (e) => {
    e.preventDefault();
    onChange({ ...filters, ...text, q });
  };
  const clear = () => {
    setText({ tag: '', batch: '', gpu_type: '' });
    setQ('');
    onChange({ status: [], tag: '', batch: '', gpu_type: '', q: '' });
  };
  const textInput = (key, label, placeholder) => (
    <div class="field inline">
      <label for={`filter-${key}`}>{label}</label>
      <input
        id={`filter-${key}`}
        name={key}
        value={text[key]}
        placeholder={placeholder}
        onInput={(e) => setText({ ...text, [key]: e.currentTarget.value })}
        data-testid={`filter-${key}`}
      />
    </div>
  );
  return (
    <form class="filters" onSubmit={apply} role="search" aria-label="Filter jobs" data-testid="jobs-filters">
      <div class="field inline grow">
        <label for="jobs-search">Search</label>
        <input
          id="jobs-search"
          type="search"
          name="q"
          value={q}
          placeholder="id or name"
          onInput={(e) => setQ(e.currentTarget.value)}
          data-testid="jobs-search"
        />
      </div>
      <fieldset class="statuses" data-testid="filter-status">
        <legend>Status</legend>
        {STATUSES.map((s) => (
          <label key={s} class="check">
            <input
              type="checkbox"
              name="status"
              value={s}
              checked={filters.status.includes(s)}
              onChange={() => toggle(s)}
              data-testid={`filter-status-${s}`}
            />
            {s}
          </label>
        ))}
      </fieldset>
      {textInput('tag', 'Tag', 'a,b')}
      {textInput('batch', 'Batch', 'b-…')}
      {textInput('gpu_type', 'GPU type', 'H100,A100')}
      <div class="buttons">
        <button type="submit" data-testid="filter-apply">
          Apply
        </button>
        <button type="button" onClick={clear} data-testid="filter-clear">
          Clear
        </button>
      </div>
    </form>
  );
}

export function JobsPage() {
  const { search } = useLocation();
  const filters = useMemo(() => readFilters(search), [search]);
  // The `after` cursors that led to this page; empty on the first page, and
  // again whenever the filters change.
  const [pager, setPager] = useState({ search, cursors: [] });
  const cursors = pager.search === search ? pager.cursors : [];
  const setCursors = (list) => setPager({ search, cursors: list });
  const after = cursors.length ? cursors[cursors.length - 1] : '';
  const now = useNow(5000);
  const { data, error, loading, reload, setData } = useAsync(
    () =>
      get(
        withQuery('/v1/jobs', {
          status: filters.status,
          tag: filters.tag,
          batch: filters.batch,
          gpu_type: filters.gpu_type,
          q: filters.q,
          limit: PAGE,
          after,
          total: true,
        }),
      ),
    [search, after],
  );

  useEffect(() => {
    document.title = 'Jobs · Tide';
  }, []);

  const firstPage = cursors.length === 0;
  const refetch = useRef({ timer: null, reload, firstPage });
  refetch.current.reload = reload;
  refetch.current.firstPage = firstPage;
  useEffect(() => {
    const r = refetch.current;
    const stop = watchJobs({
      onJob: (job) => {
        setData((d) => {
          if (!d || !d.jobs) return d;
          const i = d.jobs.findIndex((j) => j.id === job.id);
          if (i < 0) return d;
          const jobs = d.jobs.slice();
          jobs[i] = job;
          return { ...d, jobs };
        });
        if (r.firstPage && !r.timer) {
          r.timer = setTimeout(() => {
            r.timer = null;
            r.reload();
          }, REFETCH_MS);
        }
      },
      onPoll: () => r.reload(),
    });
    return () => {
      stop();
      clearTimeout(r.timer);
      r.timer = null;
    };
  }, []);

  const change = (f) => {
    setPager({ search: null, cursors: [] });
    navigate(filtersPath(f), { replace: true });
  };
  const jobs = (data && data.jobs) || [];
  const total = data && typeof data.total === 'number' ? data.total : null;
  const filtered = filters.status.length || filters.tag || filters.batch || filters.gpu_type || filters.q;
  const start = cursors.length * PAGE;

  return (
    <>
      <div class="page-head">
        <h1>Jobs</h1>
        <Link href="/new" class="button primary" data-testid="new-job-link">
          New job
        </Link>
      </div>
      <Filters filters={filters} onChange={change} />
      <ErrorNote error={error} />
      <div class="list-head">
        <p data-testid="jobs-total" aria-live="polite">
          {total !== null
            ? `${total} ${total === 1 ? 'job' : 'jobs'}`
            : data
              ? `${jobs.length}${data.next ? '+' : ''} jobs`
              : ''}
          {jobs.length > 0 && total !== null && total > PAGE
            ? ` · showing ${start + 1}–${start + jobs.length}`
            : ''}
          {loading && <span class="muted"> · loading…</span>}
        </p>
        <div class="pager">
          <button
            type="button"
            disabled={firstPage}
            onClick={() => setCursors(cursors.slice(0, -1))}
            data-testid="jobs-prev"
          >
            Previous
          </button>
          <button
            type="button"
            disabled={!data || !data.next}
            onClick={() => setCursors([...cursors, data.next])}
            data-testid="jobs-next"
          >
            Next
          </button>
        </div>
      </div>
      {data && jobs.length === 0 ? (
        <p class="empty" data-testid="jobs-empty">
          {filtered ? (
            'No job matches these filters.'
          ) : (
            <>
              No jobs yet. <Link href="/new">Submit one</Link>, or run <code>tide submit</code>.
            </>
          )}
        </p>
      ) : (
        <JobsTable jobs={jobs} now={now} caption="Jobs" />
      )}
    </>
  );
}
