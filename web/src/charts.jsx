// The console's charts, drawn with uPlot: GPU telemetry over time, a job's
// metrics over its steps, a batch's scatter of a parameter against a
// metric, cost per day, earnings over time.
//
// Each chart is a <figure> whose caption names it; the plot is a canvas
// sized to the width of its column and redrawn when that changes.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { useEffect, useMemo, useRef } from 'preact/hooks';

export const PALETTE = [
  '#4fc3f7',
  '#ffb74d',
  '#81c784',
  '#f48fb1',
  '#b39ddb',
  '#fff176',
  '#4db6ac',
  '#ff8a65',
];

function theme() {
  const cs = getComputedStyle(document.documentElement);
  return {
    fg: cs.getPropertyValue('--fg-muted').trim() || '#a8b3bd',
    grid: cs.getPropertyValue('--grid').trim() || 'rgba(255,255,255,0.08)',
  };
}

// Tick labels that keep small values apart (a learning rate of 3e-4 is not "0").
function tick(v) {
  if (v === null || v === undefined) return '';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-3) return v.toExponential(1);
  if (a >= 1000) return Math.round(v).toLocaleString();
  return String(+v.toPrecision(3));
}

const ticks = (u, splits) => splits.map(tick);

function axes(xLabel, yLabel, xTime = true) {
  const t = theme();
  const base = { stroke: t.fg, grid: { stroke: t.grid, width: 1 }, ticks: { stroke: t.grid, width: 1 } };
  return [
    { ...base, label: xLabel || undefined, ...(xTime ? {} : { values: ticks }) },
    { ...base, label: yLabel || undefined, size: 60, values: ticks },
  ];
}

// A uPlot chart of `data` ([x, ...ys]) with `opts` (without size). The
// plot is rebuilt when `opts` changes (callers memoize it) and only given
// new data otherwise.
export function Plot({ opts, data, height = 200, label, testid }) {
  const box = useRef(null);
  const plot = useRef(null);
  const latest = useRef(data);
  latest.current = data;
  useEffect(() => {
    const el = box.current;
    const width = () => Math.max(240, el.clientWidth);
    const u = new uPlot({ ...opts, width: width(), height }, latest.current, el);
    plot.current = u;
    let ro = null;
    if (typeof ResizeObserver !== 'undefined') {
      ro = new ResizeObserver(() => {
        const w = width();
        if (w !== u.width) u.setSize({ width: w, height });
      });
      ro.observe(el);
    }
    return () => {
      if (ro) ro.disconnect();
      u.destroy();
      plot.current = null;
    };
  }, [opts, height]);
  useEffect(() => {
    if (plot.current && plot.current.data !== data) plot.current.setData(data);
  }, [data]);
  return (
    <figure class="chart" data-testid={testid}>
      <figcaption>{label}</figcaption>
      <div ref={box} class="plot" role="img" aria-label={label} />
    </figure>
  );
}

function lineSeries(labels, unit) {
  return labels.map((l, i) => ({
    label: l,
    stroke: PALETTE[i % PALETTE.length],
    width: 1.5,
    spanGaps: true,
    points: { show: false },
    value: (u, v) => (v === null || v === undefined ? '—' : `${+v.toFixed(2)}${unit ? ` ${unit}` : ''}`),
  }));
}

// Lines over time. `times` in Unix ms; each of `series` is {label, values}
// aligned with `times` (null where there is no reading).
export function TimeChart({ label, times, series, unit = '', yRange, height, testid }) {
  const labels = series.map((s) => s.label).join('\u0000');
  const opts = useMemo(
    () => ({
      scales: { x: { time: true }, y: yRange ? { range: yRange } : {} },
      axes: axes('', unit),
      series: [
        { label: 'time', value: (u, v) => (v ? new Date(v * 1000).toLocaleTimeString() : '—') },
        ...lineSeries(
          series.map((s) => s.label),
          unit,
        ),
      ],
      cursor: { drag: { x: true, y: false } },
    }),
    [labels, unit, yRange && yRange.join(',')],
  );
  const data = useMemo(() => [times.map((t) => t / 1000), ...series.map((s) => s.values)], [times, series]);
  return <Plot opts={opts} data={data} label={label} height={height} testid={testid} />;
}

// Lines over a numeric x (a job's metrics over `step`).
export function XYChart({ label, x, series, xLabel = 'step', height, testid }) {
  const labels = series.map((s) => s.label).join('\u0000');
  const opts = useMemo(
    () => ({
      scales: { x: { time: false }, y: {} },
      axes: axes(xLabel, '', false),
      series: [
        { label: xLabel },
        ...lineSeries(
          series.map((s) => s.label),
          '',
        ),
      ],
    }),
    [labels, xLabel],
  );
  const data = useMemo(() => [x, ...series.map((s) => s.values)], [x, series]);
  return <Plot opts={opts} data={data} label={label} height={height} testid={testid} />;
}

// Points of y against x, x sorted first (uPlot wants ascending x).
// `logX` draws x on a log scale (learning rates).
export function ScatterChart({ label, points, xLabel, yLabel, logX = false, height = 260, testid }) {
  const usable = logX ? points.filter((p) => p.x > 0) : points;
  const opts = useMemo(
    () => ({
      mode: 1,
      scales: { x: { time: false, distr: logX ? 3 : 1 }, y: {} },
      axes: axes(xLabel, yLabel, false),
      series: [
        { label: xLabel },
        {
          label: yLabel,
          stroke: PALETTE[0],
          fill: PALETTE[0],
          paths: () => null,
          points: { show: true, size: 8, fill: PALETTE[0] },
        },
      ],
      legend: { show: true },
    }),
    [xLabel, yLabel, logX],
  );
  const data = useMemo(() => {
    const sorted = [...usable].sort((a, b) => a.x - b.x);
    return [sorted.map((p) => p.x), sorted.map((p) => p.y)];
  }, [points, logX]);
  return <Plot opts={opts} data={data} label={label} height={height} testid={testid} />;
}

// Bars per day: `days` are Unix ms at local midnight.
export function DailyBars({ label, days, values, unit = '', height = 200, testid }) {
  const opts = useMemo(
    () => ({
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: axes('', unit),
      series: [
        { label: 'day', value: (u, v) => (v ? new Date(v * 1000).toLocaleDateString() : '—') },
        {
          label: unit || 'value',
          stroke: PALETTE[0],
          fill: 'rgba(79,195,247,0.45)',
          paths: uPlot.paths.bars({ size: [0.7, 40] }),
          points: { show: false },
        },
      ],
    }),
    [unit],
  );
  const data = useMemo(() => [days.map((d) => d / 1000), values], [days, values]);
  return <Plot opts={opts} data={data} label={label} height={height} testid={testid} />;
}
