// The provider page: the nodes the caller rents out (GET /v1/nodes, those
// whose `owner` is the caller; every node for the admin) with each GPU's
// utilisation, memory and temperature at the last heartbeat and over time
// (GET /v1/nodes/{id}/telemetry), and what they earned (GET
// /v1/provider/earnings): over time, per node, in all.
import { useEffect, useMemo } from 'preact/hooks';
import { get } from '../api.js';
import { TimeChart } from '../charts.jsx';
import { credits, gpuMemory, percent, relative, shortDuration } from '../format.js';
import { ErrorNote, Loading, useAsync, useInterval } from '../ui.jsx';
import { GpuCharts, telemetrySeries, withReading } from './job_charts.jsx';

const REFRESH_MS = 5000;
const NODE_RECENT = 300; // readings a node keeps at full rate (server/telemetry.h)

function nodeState(n) {
  if (n.state !== 'ready') return n.state;
  return n.draining ? 'draining' : 'ready';
}

export function GpuTable({ node }) {
  return (
    <table class="compact" data-testid="node-gpus">
      <thead>
        <tr>
          <th scope="col">GPU</th>
          <th scope="col">Model</th>
          <th scope="col" class="num">
            Utilisation
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
        {(node.gpus || []).map((g) => (
          <tr key={g.index} data-testid="node-gpu" data-gpu-index={g.index}>
            <td>{g.index}</td>
            <td title={g.name}>{g.model || g.name}</td>
            <td class="num">
              <meter
                min={0}
                max={100}
                value={Math.max(0, g.utilization_pct)}
                aria-label={`GPU ${g.index} utilisation`}
              />{' '}
              {percent(g.utilization_pct)}
            </td>
            <td class="num">
              {g.memory_used_mb >= 0 ? `${(g.memory_used_mb / 1024).toFixed(1)} / ` : '— / '}
              {gpuMemory(g.memory_mb)}
            </td>
            <td class="num">{g.temperature_c >= 0 ? `${g.temperature_c} °C` : '—'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

// Every GPU of the node over time, one line each: the whole history once,
// then each refresh only the newest readings (series=false), added to it.
function NodeCharts({ node }) {
  const path = `/v1/nodes/${encodeURIComponent(node.id)}/telemetry`;
  const { data, error, setData } = useAsync(() => get(path), [node.id]);
  const refresh = async () => {
    try {
      const brief = await get(`${path}?series=false`);
      setData((t) => withReading(t, brief, NODE_RECENT));
    } catch {
      // The next refresh tries again; the charts keep what they have.
    }
  };
  useInterval(refresh, REFRESH_MS, node.state === 'ready' && !!data);
  const series = useMemo(() => telemetrySeries(data), [data]);
  if (error) return <ErrorNote error={error} />;
  if (!series.times.length) return null;
  return <GpuCharts series={series} title={node.name} testid="node-chart" data-testid="node-charts" />;
}

// What the node asks per GPU-hour for each of its models: the provider's
// own ask (the agent's --price), or else the exchange's list price.
function Asks({ node, prices }) {
  const models = [...new Set((node.gpus || []).map((g) => g.model || g.name))];
  if (!models.length) return null;
  const list = (prices && prices.per_gpu_hour) || {};
  return (
    <p class="muted" data-testid="node-asks">
      Asks per GPU-hour:{' '}
      {models
        .map((m) => {
          const own = node.prices && node.prices[m];
          if (own !== undefined) return `${m} ${credits(own / 1e6)} (my price)`;
          if (list[m] !== undefined) return `${m} ${credits(list[m])} (the exchange's list price)`;
          return `${m}: no price set`;
        })
        .join(' · ')}
    </p>
  );
}

function NodeCard({ node, prices }) {
  const state = nodeState(node);
  const labels = Object.entries(node.labels || {});
  return (
    <article
      class="node panel"
      data-testid="provider-node"
      data-node-id={node.id}
      aria-labelledby={`node-${node.id}`}
    >
      <div class="panel-head">
        <h3 id={`node-${node.id}`}>
          {node.name} <span class="mono muted">{node.id}</span>
        </h3>
        <span class={`status status-${state}`} data-testid="node-state">
          {state}
        </span>
      </div>
      <p class="muted">
        {(node.gpus || []).length} GPUs, {node.free_gpus} free · {node.running_jobs} running jobs · last
        heartbeat {relative(node.last_heartbeat)}
        {node.reliability !== undefined ? ` · reliability ${Math.round(node.reliability * 100)}%` : ''}
        {labels.length ? ` · ${labels.map(([k, v]) => `${k}=${v}`).join(', ')}` : ''}
      </p>
      <GpuTable node={node} />
      <Asks node={node} prices={prices} />
      <NodeCharts node={node} />
    </article>
  );
}

function Earnings() {
  const { data, error } = useAsync(() => get('/v1/provider/earnings'), []);
  const lines = (data && data.lines) || [];
  const perNode = useMemo(() => {
    const m = new Map();
    for (const l of lines) {
      const e = m.get(l.node_id) || { node: l.node_id, gpu_seconds: 0, gross: 0, fee: 0, earned: 0 };
      e.gpu_seconds += l.gpu_seconds || 0;
      e.gross += Number(l.gross) || 0;
      e.fee += Number(l.fee) || 0;
      e.earned += Number(l.earned) || 0;
      m.set(l.node_id, e);
    }
    return [...m.values()];
  }, [data]);
  // What was earned, summed by the time each attempt ended (or now, for
  // one still running): how the earnings grew.
  const cumulative = useMemo(() => {
    const now = Date.now();
    const points = lines
      .map((l) => ({ at: l.finished_at > 0 ? l.finished_at : now, earned: Number(l.earned) || 0 }))
      .sort((a, b) => a.at - b.at);
    const starts = lines.map((l) => l.started_at).filter((t) => t > 0);
    let sum = 0;
    // From nothing, when the first paid attempt started.
    const times = starts.length ? [Math.min(...starts)] : [];
    const values = starts.length ? [0] : [];
    for (const p of points) {
      sum += p.earned;
      if (times.length && times[times.length - 1] === p.at) values[values.length - 1] = +sum.toFixed(6);
      else {
        times.push(p.at);
        values.push(+sum.toFixed(6));
      }
    }
    return { times, series: [{ label: 'earned', values }] };
  }, [data]);
  return (
    <section class="panel" aria-labelledby="earnings-title">
      <h2 id="earnings-title">Earnings</h2>
      <ErrorNote error={error} />
      {!data && !error && <Loading />}
      {data && (
        <dl class="facts big">
          <div>
            <dt>Earned in all</dt>
            <dd data-testid="earnings-total">{credits(data.total_earned)}</dd>
          </div>
          <div>
            <dt>Paid attempts</dt>
            <dd>{lines.length}</dd>
          </div>
        </dl>
      )}
      {cumulative.times.length > 1 && (
        <TimeChart
          label="Earnings over time, running total (credits)"
          times={cumulative.times}
          series={cumulative.series}
          unit="credits"
          testid="chart-earnings"
        />
      )}
      {perNode.length > 0 && (
        <div class="table-wrap">
          <table data-testid="earnings-by-node">
            <thead>
              <tr>
                <th scope="col">Node</th>
                <th scope="col" class="num">
                  GPU time
                </th>
                <th scope="col" class="num">
                  Gross
                </th>
                <th scope="col" class="num">
                  Fee
                </th>
                <th scope="col" class="num">
                  Earned
                </th>
              </tr>
            </thead>
            <tbody>
              {perNode.map((e) => (
                <tr key={e.node}>
                  <td class="mono">{e.node}</td>
                  <td class="num">{shortDuration(e.gpu_seconds)}</td>
                  <td class="num">{credits(e.gross)}</td>
                  <td class="num">{credits(e.fee)}</td>
                  <td class="num">{credits(e.earned)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function ProviderPage({ session }) {
  const { data, error, reload } = useAsync(() => get('/v1/nodes'), []);
  const prices = useAsync(() => get('/v1/prices'), []);
  useInterval(reload, REFRESH_MS);
  useEffect(() => {
    document.title = 'Provider · Tide';
  }, []);
  const admin = session.kind === 'admin';
  const nodes = ((data && data.nodes) || []).filter((n) => admin || n.owner === session.user_id);
  return (
    <>
      <h1>Provider</h1>
      <section aria-labelledby="nodes-title">
        <h2 id="nodes-title">{admin ? 'All nodes' : 'My nodes'}</h2>
        <ErrorNote error={error} />
        {!data && !error && <Loading />}
        {data && !nodes.length && (
          <p class="empty" data-testid="provider-no-nodes">
            You rent out no nodes. An operator's <code>tide admin join-token --provider {session.user}</code>{' '}
            prints the <code>tide agent</code> command to run on a GPU machine.
          </p>
        )}
        <div class="nodes" data-testid="provider-nodes">
          {nodes.map((n) => (
            <NodeCard key={n.id} node={n} prices={prices.data} />
          ))}
        </div>
        {data && nodes.length > 0 && (
          <p class="muted">Readings of each node's last heartbeat, refreshed every {REFRESH_MS / 1000} s.</p>
        )}
      </section>
      <Earnings />
    </>
  );
}
