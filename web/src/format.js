// How the console writes amounts, times, sizes and a job's GPUs.

// Credits as the API gives them: a number with at most six decimals.
export function credits(n) {
  if (n === null || n === undefined || n === '') return '—';
  const x = Number(n);
  if (!Number.isFinite(x)) return String(n);
  return x.toFixed(6).replace(/\.?0+$/, '');
}

// A Unix-millisecond time as local date and time; 0 is "not yet".
export function dateTime(ms) {
  if (!ms) return '—';
  return new Date(ms).toLocaleString();
}

export function shortDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h}h${m % 60}m` : `${h}h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d}d${h % 24}h` : `${d}d`;
}

// How long ago `ms` was, "3m"; "—" for 0.
export function age(ms, now = Date.now()) {
  if (!ms) return '—';
  return shortDuration((now - ms) / 1000);
}

// "3m ago" or "in 5m".
export function relative(ms, now = Date.now()) {
  if (!ms) return '—';
  const d = (ms - now) / 1000;
  if (Math.abs(d) < 1) return 'now';
  return d > 0 ? `in ${shortDuration(d)}` : `${shortDuration(-d)} ago`;
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let x = Number(n);
  let i = 0;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return i === 0 ? `${x} B` : `${x.toFixed(x < 10 ? 1 : 0)} ${units[i]}`;
}

// GPU memory in MiB as "24 GB" (binary, as the spec's sizes are).
export function gpuMemory(mb) {
  if (!mb || mb < 0) return '—';
  const gb = mb / 1024;
  return Number.isInteger(gb) ? `${gb} GB` : `${gb.toFixed(1)} GB`;
}

// The GPU models a job accepts: "H100", "A100|H100" or "any".
export function gpuTypes(resources) {
  const t = resources && resources.gpu_type;
  if (!t || (Array.isArray(t) && t.length === 0)) return 'any';
  return Array.isArray(t) ? t.join('|') : String(t);
}

// "2 × RTX4090", or "2 nodes × 8 × H100" for a multi-node job.
export function jobGpus(job) {
  const r = job.resources || {};
  const count = r.gpu_count || r.gpus_per_node || 1;
  const nodes = r.nodes || 1;
  const model = gpuTypes(r);
  return nodes > 1 ? `${nodes} nodes × ${count} × ${model}` : `${count} × ${model}`;
}

export const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

export function isEnded(status) {
  return TERMINAL.has(status);
}

export function percent(x) {
  if (x === null || x === undefined || x < 0) return '—';
  return `${Math.round(x)}%`;
}
