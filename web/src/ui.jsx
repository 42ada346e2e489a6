// Pieces every page of the console uses: loading data, showing errors,
// status badges, copy and confirm buttons, form fields with their errors.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

// Runs `load` (an async function) when `deps` change; `reload()` runs it
// again, keeping what is shown until the new answer comes.
export function useAsync(load, deps) {
  const [state, setState] = useState({ data: undefined, error: null, loading: true });
  const seq = useRef(0);
  const run = useCallback(async () => {
    const n = ++seq.current;
    setState((s) => ({ ...s, loading: true }));
    try {
      const data = await load();
      if (n === seq.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (error.name === 'AbortError') return;
      if (n === seq.current) setState((s) => ({ data: s.data, error, loading: false }));
    }
  }, deps);
  useEffect(() => {
    run();
  }, [run]);
  // Data set here is newer than any read still under way: that read's
  // answer is dropped.
  const setData = useCallback((f) => {
    seq.current++;
    setState((s) => ({ ...s, loading: false, data: typeof f === 'function' ? f(s.data) : f }));
  }, []);
  return { ...state, reload: run, setData };
}

// The current time, refreshed every `ms`, for ages that keep counting.
export function useNow(ms = 10000) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

// Calls fn every `ms` while `active`.
export function useInterval(fn, ms, active = true) {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    if (!active) return undefined;
    const t = setInterval(() => saved.current(), ms);
    return () => clearInterval(t);
  }, [ms, active]);
}

export function ErrorNote({ error, testid = 'error' }) {
  if (!error) return null;
  const text = typeof error === 'string' ? error : error.message;
  return (
    <p class="error" role="alert" data-testid={testid}>
      {text}
    </p>
  );
}

export function Loading({ what = 'Loading' }) {
  return (
    <p class="muted" role="status">
      {what}…
    </p>
  );
}

export function StatusBadge({ status, testid }) {
  return (
    <span class={`status status-${status}`} data-testid={testid} data-status={status}>
      {status}
    </span>
  );
}

// Copies `text` to the clipboard; says so for a moment.
export function CopyButton({ text, label = 'Copy', testid = 'copy' }) {
  const [done, setDone] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setDone(true);
      setTimeout(() => setDone(false), 1500);
    } catch {
      setDone(false);
    }
  };
  return (
    <button type="button" class="small" onClick={copy} data-testid={testid}>
      {done ? 'Copied' : label}
    </button>
  );
}

// A button that asks once more before it acts: the first click shows the
// question with "Yes" and "No"; "Yes" runs onConfirm.
export function ConfirmButton({
  label,
  question,
  yes = 'Yes',
  no = 'No',
  onConfirm,
  testid,
  danger = true,
  small = false,
  disabled,
}) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const yesRef = useRef(null);
  useEffect(() => {
    if (asking && yesRef.current) yesRef.current.focus();
  }, [asking]);
  if (!asking) {
    return (
      <button
        type="button"
        class={`${danger ? 'danger' : ''}${small ? ' small' : ''}`}
        onClick={() => setAsking(true)}
        data-testid={testid}
        disabled={disabled}
      >
        {label}
      </button>
    );
  }
  const confirm = async () => {
    setBusy(true);
    try {
      await onConfirm();
    } finally {
      setBusy(false);
      setAsking(false);
    }
  };
  return (
    <span class="confirm" role="group" aria-label={question}>
      <span>{question}</span>
      <button
        type="button"
        ref={yesRef}
        class={danger ? 'danger' : 'primary'}
        onClick={confirm}
        disabled={busy}
        data-testid={testid && `${testid}-yes`}
      >
        {yes}
      </button>
      <button
        type="button"
        onClick={() => setAsking(false)}
        disabled={busy}
        data-testid={testid && `${testid}-no`}
      >
        {no}
      </button>
    </span>
  );
}

// A labelled input with its hint and error. `name` is the spec path the
// server names in an error's `field`; the child input gets id, name and
// aria attributes from here.
export function Field({ label, name, error, hint, children, id }) {
  const inputId = id || `f-${name.replace(/[^a-zA-Z0-9_-]/g, '-')}`;
  const described = [hint ? `${inputId}-hint` : '', error ? `${inputId}-err` : ''].filter(Boolean).join(' ');
  const child =
    typeof children === 'function'
      ? children({
          id: inputId,
          name,
          'aria-invalid': error ? 'true' : undefined,
          'aria-describedby': described || undefined,
        })
      : children;
  return (
    <div class={`field${error ? ' has-error' : ''}`}>
      <label for={inputId}>{label}</label>
      {child}
      {hint && (
        <small id={`${inputId}-hint`} class="hint">
          {hint}
        </small>
      )}
      {error && (
        <small id={`${inputId}-err`} class="field-error" data-testid={`error-${name}`}>
          {error}
        </small>
      )}
    </div>
  );
}

// A column header that sorts a table: a real button, with aria-sort on the cell.
export function SortHeader({ label, sortKey, sort, setSort, numeric = false }) {
  const active = sort.key === sortKey;
  const dir = active ? sort.dir : 'none';
  const next = () =>
    setSort({ key: sortKey, dir: active && sort.dir === 'ascending' ? 'descending' : 'ascending' });
  return (
    <th aria-sort={dir} scope="col" class={numeric ? 'num' : undefined}>
      <button type="button" class="sort" onClick={next}>
        {label}
        <span aria-hidden="true">{dir === 'ascending' ? ' ▲' : dir === 'descending' ? ' ▼' : ''}</span>
      </button>
    </th>
  );
}

// Orders rows by a value read with `get`: numbers as numbers, missing last.
export function sortRows(rows, get, dir) {
  const sign = dir === 'descending' ? -1 : 1;
  return [...rows].sort((a, b) => {
    const x = get(a);
    const y = get(b);
    const xm = x === undefined || x === null || x === '';
    const ym = y === undefined || y === null || y === '';
    if (xm || ym) return xm === ym ? 0 : xm ? 1 : -1;
    if (typeof x === 'number' && typeof y === 'number') return sign * (x - y);
    return sign * String(x).localeCompare(String(y), undefined, { numeric: true });
  });
}
