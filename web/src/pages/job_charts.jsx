// A job's GPU telemetry (GET /v1/jobs/{id}/telemetry, followed as
// server-sent events while the job runs) and its own metrics (GET
// /v1/jobs/{id}/metrics, refreshed while it runs) as charts.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { get } from '../api.js';
import { TimeChart, XYChart } from '../charts.jsx';
import { percent } from '../format.js';
import { ErrorNote, useAsync, useInterval } from '../ui.jsx';

const TELEMETRY_MS = 5000;
const METRICS_MS = 10000;
const MAX_METRIC_CHARTS = 12;

const reading = (v) => (typeof v === 'number' && v >= 0 ? v : null);
const bucketValue = (s) => (s && s.count > 0 ? reading(s.avg) : null);

// One GPU's readings, oldest first: the coarse buckets of the last day,
// then the one-minute buckets of the last two hours, then the newest
// readings at full rate, each tier only for the time the finer ones miss.
function gpuReadings(gpu) {
  const recent = gpu.recent || [];
  const tiers = [...(gpu.tiers || [])].sort((a, b) => a.width_ms - b.width_ms);
  let until = recent.length ? recent[0].at : Infinity;
  const older = [];
  for (const tier of tiers) {
    const buckets = (tier.buckets || [])
      .filter((b) => b.start + b.width_ms <= until)
      .sort((a, b) => a.start - b.start);
    older.unshift(
      buckets.map((b) => ({
        at: b.start + Math.floor(b.width_ms / 2),
        util: bucketValue(b.utilization_pct),
        mem: bucketValue(b.memory_used_mb),
        temp: bucketValue(b.temperature_c),
      })),
    );
    if (buckets.length) until = Math.min(until, buckets[0].start);
  }
  const fine = recent.map((r) => ({
    at: r.at,
    util: reading(r.utilization_pct),
    mem: reading(r.memory_used_mb),
    temp: reading(r.temperature_c),
  }));
  return [...older.flat(), ...fine];
}

// Every GPU's readings on one time axis (null where a GPU has none).
export function telemetrySeries(t) {
  const gpus = (t && t.gpus) || [];
  const perGpu = gpus.map(gpuReadings);
  const times = [...new Set(perGpu.flat().map((r) => r.at))].sort((a, b) => a - b);
  const index = new Map(times.map((at, i) => [at, i]));
  const multiNode = new Set(gpus.map((g) => g.rank)).size > 1;
  const make = (key, scale = 1) =>
    gpus.map((g, gi) => {
      const values = new Array(times.length).fill(null);
      for (const r of perGpu[gi]) if (r[key] !== null) values[index.get(r.at)] = r[key] / scale;
      return { label: `${multiNode ? `rank ${g.rank} ` : ''}GPU ${g.index}`, values };
    });
  return { times, util: make('util'), mem: make('mem', 1024), temp: make('temp') };
}

// Utilisation, memory and temperature of GPUs over time (telemetrySeries),
// a line per GPU. `title` prefixes each chart's label ("node-1: …") and
// `testid` each chart's test id.
export function GpuCharts({ series, title = '', testid = 'chart', ...rest }) {
  const label = (what) => (title ? `${title}: ${what}` : what.charAt(0).toUpperCase() + what.slice(1));
  return (
    <div class="charts" {...rest}>
      <TimeChart
        label={label('utilisation (%)')}
        times={series.times}
        series={series.util}
        unit="%"
        yRange={[0, 100]}
        testid={`${testid}-utilization`}
      />
      <TimeChart
        label={label('memory used (GiB)')}
        times={series.times}
        series={series.mem}
        unit="GiB"
        testid={`${testid}-memory`}
      />
      <TimeChart
        label={label('temperature (°C)')}
        times={series.times}
        series={series.temp}
        unit="°C"
        testid={`${testid}-temperature`}
      />
    </div>
  );
}

const isRunning = (job) => job.status === 'running' || job.status === 'starting';

// Newest readings kept per GPU at full rate, as the server keeps a job's
// (server/telemetry.h); a node keeps 300.
const MAX_RECENT = 150;
const STREAM_RETRY_MS = 30000;

// `t` with a `reading` event folded in: each GPU's newest reading appended
// to its recent ones, its averages and the job's replaced.
export function withReading(t, brief, maxRecent = MAX_RECENT) {
  if (!t) return t;
  const key = (g) => `${g.node_id}/${g.index}/${g.rank}`;
  const byKey = new Map(brief.gpus.map((g) => [key(g), g]));
  const gpus = t.gpus.map((g) => {
    const b = byKey.get(key(g));
    if (!b) return g;
    const recent = g.recent || [];
    const last = recent.length ? recent[recent.length - 1].at : 0;
    const grown = b.now && b.now.at > last ? [...recent, b.now].slice(-maxRecent) : recent;
    return { ...g, now: b.now, average: b.average, recent: grown };
  });
  return { ...t, ...brief, gpus };
}

// A job's telemetry: read once, and while `live`, followed (`telemetry`
// replaces it, `reading` adds to it). Without EventSource, or while the
// stream is down (a refused or failed stream is tried again every 30 s),
// read again every TELEMETRY_MS.
function useJobTelemetry(id, live) {
  const path = `/v1/jobs/${encodeURIComponent(id)}/telemetry`;
  const state = useAsync(() => get(path), [id]);
  const { setData, reload } = state;
  const hasStream = typeof EventSource !== 'undefined';
  const [down, setDown] = useState(!hasStream);
  const [tries, setTries] = useState(0);
  useEffect(() => {
    if (!live || !hasStream) return undefined;
    const es = new EventSource(`${path}?follow=true`);
    let retry = null;
    const parse = (e) => {
      try {
        return JSON.parse(e.data);
      } catch {
        return null;
      }
    };
    es.addEventListener('open', () => setDown(false));
    es.addEventListener('telemetry', (e) => {
      const t = parse(e);
      if (t) setData(t);
    });
    es.addEventListener('reading', (e) => {
      const b = parse(e);
      if (b) setData((t) => withReading(t, b));
    });
    es.addEventListener('end', () => es.close());
    es.addEventListener('error', () => {
      if (es.readyState !== EventSource.CLOSED) return; // the browser reconnects
      setDown(true);
      retry = setTimeout(() => setTries((n) => n + 1), STREAM_RETRY_MS);
    });
    return () => {
      clearTimeout(retry);
      es.close();
    };
  }, [path, live, tries]);
  useInterval(reload, TELEMETRY_MS, live && down);
  // The job ended: read the last of it once.
  const was = useRef(live);
  useEffect(() => {
    if (was.current && !live) reload();
    was.current = live;
  }, [live]);
  return state;
}

export function TelemetryPanel({ job }) {
  const running = isRunning(job);
  const { data, error } = useJobTelemetry(job.id, running);
  const series = useMemo(() => telemetrySeries(data), [data]);
  const gpus = (data && data.gpus) || [];
  return (
    <section
      aria-labelledby="telemetry-title"
      class="panel"
      data-testid="telemetry"
      data-readings={series.times.length}
    >
      <h2 id="telemetry-title">GPU telemetry</h2>
      <ErrorNote error={error && error.status !== 404 ? error : null} />
      {data && data.low_utilization && (
        <p class="warning" role="status" data-testid="low-utilization">
          {data.low_utilization_reason || 'low GPU utilisation'}
        </p>
      )}
      {data && gpus.length === 0 && <p class="muted">No readings yet: the job has not run on a GPU.</p>}
      {gpus.length > 0 && (
        <>
          <div class="table-wrap">
            <table class="compact" data-testid="telemetry-gpus">
              <thead>
                <tr>
                  <th scope="col">GPU</th>
                  <th scope="col">Node</th>
                  <th scope="col">Model</th>
                  <th scope="col" class="num">
                    Utilisation now
                  </th>
                  <th scope="col" class="num">
                    Average
                  </th>
                  <th scope="col" class="num">
                    Memory
                  </th>
                  <th scope="col" class="num">
                    Temperature
                  </th>
                </tr>
              </thead>
              <tbody>
                {gpus.map((g) => (
                  <tr key={`${g.node_id}-${g.index}`}>
                    <td>
                      {(data.gpus || []).some((x) => x.rank > 0) ? `rank ${g.rank} · ` : ''}
                      {g.index}
                    </td>
                    <td>{g.node || g.node_id}</td>
                    <td>{g.model}</td>
                    <td class="num">{percent(g.now && g.now.utilization_pct)}</td>
                    <td class="num">{percent(g.average && g.average.utilization_pct)}</td>
                    <td class="num">
                      {g.now && g.now.memory_used_mb >= 0
                        ? `${(g.now.memory_used_mb / 1024).toFixed(1)} / ${(g.memory_mb / 1024).toFixed(0)} GiB`
                        : '—'}
                    </td>
                    <td class="num">
                      {g.now && g.now.temperature_c >= 0 ? `${g.now.temperature_c} °C` : '—'}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <GpuCharts series={series} />
        </>
      )}
    </section>
  );
}

// Each numeric metric over `step` (or the line's place when there is no
// step), all attempts together; a later attempt's value wins at a step it
// repeats after resuming.
export function metricSeries(lines) {
  const hasStep = lines.some((l) => typeof l.step === 'number');
  const byX = new Map();
  const names = new Set();
  lines.forEach((l, i) => {
    const x = hasStep ? l.step : i;
    if (typeof x !== 'number') return;
    const row = byX.get(x) || {};
    for (const [k, v] of Object.entries(l)) {
      if (k === 'step' || k === 'attempt' || typeof v !== 'number' || !Number.isFinite(v)) continue;
      row[k] = v;
      names.add(k);
    }
    byX.set(x, row);
  });
  const x = [...byX.keys()].sort((a, b) => a - b);
  const metrics = [...names]
    .sort()
    .map((name) => ({ label: name, values: x.map((s) => (name in byX.get(s) ? byX.get(s)[name] : null)) }));
  return { x, metrics, xLabel: hasStep ? 'step' : 'line' };
}

export function MetricsPanel({ job }) {
  const running = isRunning(job);
  const { data, error, reload } = useAsync(
    () => get(`/v1/jobs/${encodeURIComponent(job.id)}/metrics`),
    [job.id],
  );
  useInterval(reload, METRICS_MS, running);
  const series = useMemo(() => metricSeries((data && data.metrics) || []), [data]);
  const last = (data && data.last) || {};
  const lastKeys = Object.keys(last).filter((k) => k !== 'attempt');
  return (
    <section aria-labelledby="metrics-title" class="panel" data-testid="metrics">
      <h2 id="metrics-title">Metrics</h2>
      <ErrorNote error={error && error.status !== 404 ? error : null} />
      {data && !series.metrics.length && (
        <p class="muted">
          No metrics. A job writes JSON lines to <code>$TIDE_METRICS_FILE</code>, such as{' '}
          <code>{'{"step": 100, "loss": 1.8}'}</code>.
        </p>
      )}
      {lastKeys.length > 0 && (
        <dl class="facts inline" data-testid="metrics-last">
          {lastKeys.map((k) => (
            <div key={k}>
              <dt>{k}</dt>
              <dd>{typeof last[k] === 'number' ? +last[k].toPrecision(6) : String(last[k])}</dd>
            </div>
          ))}
        </dl>
      )}
      {data && data.skipped > 0 && (
        <p class="muted">
          {data.skipped === 1
            ? '1 line was not a JSON object and is'
            : `${data.skipped} lines were not JSON objects and are`}{' '}
          left out.
        </p>
      )}
      <div class="charts">
        {series.metrics.slice(0, MAX_METRIC_CHARTS).map((m) => (
          <XYChart
            key={m.label}
            label={m.label}
            x={series.x}
            series={[m]}
            xLabel={series.xLabel}
            testid={`chart-metric-${m.label}`}
          />
        ))}
      </div>
      {series.metrics.length > MAX_METRIC_CHARTS && (
        <p class="muted">
          {series.metrics.length - MAX_METRIC_CHARTS} more metrics: <code>tide metrics {job.id}</code> lists
          them all.
        </p>
      )}
    </section>
  );
}
