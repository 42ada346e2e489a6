// One job: its status and money, why it waits and when it should start,
// its attempts, its live log, its GPUs' telemetry, its metrics and its
// outputs. Kept current by /v1/events (or a refetch every 3 s without it).
// Another user's job is a 404 like a job that does not exist, and the page
// says only "Job not found" for both.
import { useEffect, useState } from 'preact/hooks';
import { del, get, pathJoin, post, watchJobs } from '../api.js';
import { bytes, credits, dateTime, isEnded, jobGpus, relative, shortDuration } from '../format.js';
import { Link } from '../router.js';
import { ConfirmButton, ErrorNote, Loading, StatusBadge, useAsync, useNow } from '../ui.jsx';
import { LogView } from './job_log.jsx';
import { MetricsPanel, TelemetryPanel } from './job_charts.jsx';

function NotFound() {
  useEffect(() => {
    document.title = 'Job not found · Tide';
  }, []);
  return (
    <div data-testid="job-not-found">
      <h1>Job not found</h1>
      <p>
        <Link href="/jobs">Back to your jobs</Link>
      </p>
    </div>
  );
}

function Fact({ label, children, testid }) {
  return (
    <div>
      <dt>{label}</dt>
      <dd data-testid={testid}>{children}</dd>
    </div>
  );
}

function Header({ job, now }) {
  const queued = job.status === 'queued';
  const gpus = job.gpus && job.gpus.length ? ` (assigned: ${job.gpus.join(', ')})` : '';
  return (
    <dl class="facts" data-testid="job-facts">
      <Fact label="Status" testid="job-status-text">
        <StatusBadge status={job.status} testid="job-status" />
        {job.reason && <span class="muted"> {job.reason}</span>}
        {job.cancel_requested && !isEnded(job.status) && <span class="muted"> (cancelling)</span>}
        {job.preempt_requested && (
          <span class="muted">
            {' '}
            (being stopped{job.requeue_reason ? `: ${job.requeue_reason}` : ' for higher-ranked work'})
          </span>
        )}
      </Fact>
      <Fact label="GPUs" testid="job-gpus">
        {jobGpus(job)}
        {gpus}
      </Fact>
      <Fact label="Node" testid="job-node">
        {job.node_id || '—'}
      </Fact>
      <Fact label="Tier">{job.tier || 'on-demand'}</Fact>
      <Fact label="Cost so far" testid="job-cost">
        {credits(job.cost)}
      </Fact>
      <Fact label="Escrow" testid="job-escrow">
        {credits(job.escrow)}
      </Fact>
      <Fact label="Attempt">{job.attempt || '—'}</Fact>
      {job.exit_code !== null && job.exit_code !== undefined && (
        <Fact label="Exit code" testid="job-exit-code">
          {job.exit_code}
        </Fact>
      )}
      <Fact label="Created">
        {dateTime(job.created_at)} <span class="muted">({relative(job.created_at, now)})</span>
      </Fact>
      {job.started_at > 0 && <Fact label="Started">{dateTime(job.started_at)}</Fact>}
      {job.finished_at > 0 && <Fact label="Finished">{dateTime(job.finished_at)}</Fact>}
      {job.max_runtime > 0 && <Fact label="Max runtime">{shortDuration(job.max_runtime)}</Fact>}
      {job.batch && (
        <Fact label="Batch">
          <Link href={`/batches/${encodeURIComponent(job.batch)}`}>{job.batch}</Link>
          {job.trial ? ` · trial ${job.trial}` : ''}
        </Fact>
      )}
      {queued && (
        <Fact label="Waiting because" testid="pending-reason">
          {job.pending_reason || '—'}
        </Fact>
      )}
      {queued && (
        <Fact label="Expected start" testid="expected-start">
          {job.expected_start
            ? `${dateTime(job.expected_start)} (${relative(job.expected_start, now)})`
            : 'no estimate'}
        </Fact>
      )}
      {job.deleted_at > 0 && <Fact label="Data deleted">{dateTime(job.deleted_at)}</Fact>}
    </dl>
  );
}

function Attempts({ job }) {
  const attempts = job.attempts || [];
  if (!attempts.length) return null;
  const rows = [];
  for (const a of attempts) {
    rows.push({ key: `${a.attempt}`, attempt: a.attempt, ...a });
    for (const [r, rank] of (a.ranks || []).entries()) {
      if (r > 0) rows.push({ key: `${a.attempt}-${r}`, attempt: `${a.attempt} · rank ${r}`, ...rank });
    }
  }
  return (
    <section aria-labelledby="attempts-title" class="panel">
      <h2 id="attempts-title">Attempts</h2>
      <div class="table-wrap">
        <table data-testid="attempts">
          <thead>
            <tr>
              <th scope="col">Attempt</th>
              <th scope="col">Node</th>
              <th scope="col">GPUs</th>
              <th scope="col">Start</th>
              <th scope="col">End</th>
              <th scope="col">Reason</th>
              <th scope="col" class="num">
                Exit code
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((a) => (
              <tr key={a.key} data-testid="attempt-row">
                <td>{a.attempt}</td>
                <td class="mono">{a.node_id || '—'}</td>
                <td>{a.gpus && a.gpus.length ? a.gpus.join(', ') : '—'}</td>
                <td>{dateTime(a.started_at)}</td>
                <td>{dateTime(a.finished_at)}</td>
                <td>{a.reason || ''}</td>
                <td class="num">{a.exit_code === null || a.exit_code === undefined ? '—' : a.exit_code}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function Outputs({ job }) {
  const base = `/v1/jobs/${encodeURIComponent(job.id)}`;
  const ended = isEnded(job.status);
  // Outputs are uploaded when the job ends: ask again then.
  const { data, error } = useAsync(() => get(`${base}/outputs`), [job.id, ended]);
  const files = (data && data.files) || [];
  return (
    <section aria-labelledby="outputs-title" class="panel" data-testid="outputs">
      <div class="panel-head">
        <h2 id="outputs-title">Outputs</h2>
        {files.length > 0 && (
          <a
            class="button"
            href={`${base}/outputs.tar`}
            download={`${job.id}-outputs.tar`}
            data-testid="outputs-download-all"
          >
            Download all
          </a>
        )}
      </div>
      <ErrorNote error={error && error.status !== 404 ? error : null} />
      {data && !files.length && (
        <p class="muted">
          {ended
            ? 'The job left no files in $TIDE_OUTPUT_DIR.'
            : 'Files the job leaves in $TIDE_OUTPUT_DIR appear here when it ends.'}
        </p>
      )}
      {files.length > 0 && (
        <ul class="files">
          {files.map((f) => (
            <li key={f.path} data-testid="output-file">
              <a
                href={pathJoin(`${base}/outputs/`, f.path)}
                download={f.path.split('/').pop()}
                data-testid="output-link"
              >
                {f.path}
              </a>
              <span class="muted"> {bytes(f.size)}</span>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

export function JobPage({ params }) {
  const id = params.id;
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  const { data: job, error, reload, setData } = useAsync(() => get(path), [id]);
  const [actionError, setActionError] = useState(null);
  const now = useNow(5000);

  useEffect(
    () =>
      watchJobs({
        onJob: (j) => {
          if (j.id === id) setData(j);
        },
        onPoll: reload,
      }),
    [id],
  );
  useEffect(() => {
    if (job) document.title = `${job.name || job.id} · Tide`;
  }, [job && job.name]);

  if (error && error.status === 404 && !job) return <NotFound />;
  if (!job) return error ? <ErrorNote error={error} /> : <Loading what="Loading the job" />;

  const cancel = async () => {
    setActionError(null);
    try {
      setData(await post(`${path}/cancel`));
    } catch (e) {
      setActionError(e);
    }
  };
  const remove = async () => {
    setActionError(null);
    try {
      setData(await del(path));
    } catch (e) {
      setActionError(e);
    }
  };
  const ended = isEnded(job.status);

  return (
    <>
      <div class="page-head">
        <div>
          <p class="crumbs">
            <Link href="/jobs">Jobs</Link> / <span class="mono">{job.id}</span>
          </p>
          <h1 data-testid="job-title">{job.name || job.id}</h1>
        </div>
        <div class="actions">
          {!ended && !job.cancel_requested && (
            <ConfirmButton
              label="Cancel job"
              question="Cancel this job?"
              yes="Yes, cancel it"
              no="Keep it"
              onConfirm={cancel}
              testid="cancel-job"
            />
          )}
          {ended && !job.deleted_at && (
            <ConfirmButton
              label="Delete data"
              question="Delete its logs, outputs, checkpoints and code for good?"
              yes="Yes, delete"
              no="Keep"
              onConfirm={remove}
              testid="delete-job"
            />
          )}
        </div>
      </div>
      <ErrorNote error={actionError} testid="job-action-error" />
      <ErrorNote error={error && error.status !== 404 ? error : null} />
      <Header job={job} now={now} />
      <details class="panel">
        <summary>Command and spec</summary>
        <pre class="spec" data-testid="job-command">
          {JSON.stringify(job.command)}
        </pre>
        <pre class="spec">
          {JSON.stringify(
            {
              image: job.image,
              resources: job.resources,
              env: job.env,
              secrets: job.secrets,
              tags: job.tags,
              code: job.code,
              max_runtime: job.max_runtime,
              max_cost: job.max_cost,
              priority: job.priority,
              constraints: job.constraints,
            },
            null,
            2,
          )}
        </pre>
      </details>
      <Attempts job={job} />
      <LogView job={job} />
      <TelemetryPanel job={job} />
      <MetricsPanel job={job} />
      <Outputs job={job} />
    </>
  );
}
