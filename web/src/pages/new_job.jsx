// The New job page. "Form" builds a job spec (docs/spec.md) field by
// field, with the GPU models on offer (GET /v1/nodes, GET /v1/prices): each
// with its price per GPU-hour, memory and free GPUs. "Estimate" asks
// POST /v1/estimate for the cost and the expected start; "Submit" posts the
// spec (POST /v1/jobs) and opens the job. "Spec file" takes a pasted or
// uploaded JSON job spec or batch file as is.
//
// A server error names the field at fault (`resources.gpu_count`,
// `env.FOO`); it shows under that input, else at the top of the form.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { get, post, request } from '../api.js';
import { credits, dateTime, gpuMemory, relative } from '../format.js';
import { navigate } from '../router.js';
import { buildSpec, classifySpecText, inputFor, parseCommand } from '../spec.js';
import { ErrorNote, Field } from '../ui.jsx';
import { gzipBlob, tarBlob } from '../tar.js';
import { CodeUpload } from './code_upload.jsx';

const FIELDS = [
  'name',
  'image',
  'command',
  'resources.gpu_type',
  'resources.gpu_count',
  'resources.nodes',
  'resources.gpu_memory',
  'max_runtime',
  'max_cost',
  'tier',
  'code',
  'tags',
  'env',
  'hours',
];

const EMPTY = {
  name: '',
  image: 'host',
  command: '',
  gpu_type: 'any',
  gpu_count: '1',
  nodes: '1',
  gpu_memory: '',
  max_runtime: '',
  max_cost: '',
  tier: 'on-demand',
  code: '',
  tags: '',
  env: '',
  hours: '',
};

function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
}

// The GPU models on offer: per model its list price, memory, and the GPUs
// free now on ready nodes that are not draining (a node with several models
// counts each model's free GPUs as at most that many).
export function buildOffer(nodes, prices) {
  const per = (prices && prices.per_gpu_hour) || {};
  const models = new Map();
  const entry = (model) => {
    if (!models.has(model))
      models.set(model, { model, price: per[model] ?? null, total: 0, free: 0, memMin: 0, memMax: 0 });
    return models.get(model);
  };
  for (const n of nodes || []) {
    if (n.state !== 'ready') continue;
    const counts = new Map();
    for (const g of n.gpus || []) {
      const e = entry(g.model || g.name);
      counts.set(e.model, (counts.get(e.model) || 0) + 1);
      e.memMin = e.memMin ? Math.min(e.memMin, g.memory_mb) : g.memory_mb;
      e.memMax = Math.max(e.memMax, g.memory_mb);
    }
    for (const [model, count] of counts) {
      const e = entry(model);
      e.total += count;
      if (!n.draining) e.free += Math.min(count, Math.max(0, n.free_gpus || 0));
    }
  }
  for (const model of Object.keys(per)) entry(model);
  return [...models.values()].sort((a, b) => a.model.localeCompare(b.model));
}

function memoryText(e) {
  if (!e.memMax) return 'memory —';
  return e.memMin && e.memMin !== e.memMax
    ? `${gpuMemory(e.memMin)}–${gpuMemory(e.memMax)}`
    : gpuMemory(e.memMax);
}

function GpuPicker({ offer, value, onChange, error, spot, prices }) {
  const discount = (prices && prices.spot_discount) || 0;
  const price = (p) => (p === null ? 'no price' : `${credits(spot ? p * (1 - discount) : p)} per GPU-hour`);
  const options = [{ model: 'any', label: 'Any model' }, ...offer.map((e) => ({ ...e, label: e.model }))];
  return (
    <fieldset
      class={`gpu-picker${error ? ' has-error' : ''}`}
      data-testid="gpu-picker"
      aria-describedby={error ? 'gpu-err' : undefined}
    >
      <legend>GPU model</legend>
      {options.map((o) => (
        <label
          key={o.model}
          class={`gpu-option${value === o.model ? ' selected' : ''}`}
          data-testid="gpu-option"
          data-model={o.model}
        >
          <input
            type="radio"
            name="resources.gpu_type"
            value={o.model}
            checked={value === o.model}
            onChange={() => onChange(o.model)}
          />
          <span class="gpu-name">{o.label}</span>
          {o.model === 'any' ? (
            <span class="muted">whatever is free first</span>
          ) : (
            <>
              <span>{price(o.price)}</span>
              <span>{memoryText(o)}</span>
              <span class={o.free ? 'ok' : 'muted'}>
                {o.free} of {o.total} free
              </span>
            </>
          )}
        </label>
      ))}
      {offer.length === 0 && (
        <p class="muted">No node offers GPUs yet; a job for any model waits until one joins.</p>
      )}
      {error && (
        <small id="gpu-err" class="field-error" data-testid="error-resources.gpu_type">
          {error}
        </small>
      )}
    </fieldset>
  );
}

function Estimate({ estimate }) {
  if (!estimate) return null;
  const e = estimate;
  let start;
  if (e.never_starts) start = `never as asked: ${e.never_starts}`;
  else if (!e.expected_start) start = 'no estimate';
  else if (e.expected_start <= Date.now() + 1000) start = 'now';
  else start = `${dateTime(e.expected_start)} (${relative(e.expected_start)})`;
  return (
    <div class="estimate" role="status" data-testid="estimate">
      <dl class="facts inline">
        <div>
          <dt>Price</dt>
          <dd>
            {credits(e.rate)} per GPU-hour × {e.gpus} GPU{e.gpus === 1 ? '' : 's'} ×{' '}
            {+Number(e.hours).toFixed(3)} h
          </dd>
        </div>
        <div>
          <dt>Cost</dt>
          <dd data-testid="estimate-cost">{credits(e.base)}</dd>
        </div>
        <div>
          <dt>With reserve</dt>
          <dd data-testid="estimate-total">
            {credits(e.total)} <span class="muted">(reserve {credits(e.reserve)})</span>
          </dd>
        </div>
        <div>
          <dt>Expected start</dt>
          <dd data-testid="estimate-start" class={e.never_starts ? 'warning-text' : ''}>
            {start}
          </dd>
        </div>
      </dl>
    </div>
  );
}

// Errors of one request, by form input: {input: message, '': top}.
function errorsFrom(err) {
  const input = inputFor(err.field, FIELDS);
  if (input) return { [input]: err.message };
  return { '': err.field ? `${err.field}: ${err.message}` : err.message };
}

function SpecForm({ session }) {
  const [v, setV] = useState(EMPTY);
  const [errors, setErrors] = useState({});
  const [estimate, setEstimate] = useState(null);
  const [busy, setBusy] = useState('');
  const [offer, setOffer] = useState({ models: [], prices: null, error: null });
  const key = useRef(newKey());
  const top = useRef(null);

  useEffect(() => {
    Promise.allSettled([get('/v1/nodes'), get('/v1/prices')]).then(([n, p]) => {
      const nodes = n.status === 'fulfilled' ? n.value.nodes : [];
      const prices = p.status === 'fulfilled' ? p.value : null;
      const error = n.status === 'rejected' ? n.reason : p.status === 'rejected' ? p.reason : null;
      setOffer({ models: buildOffer(nodes, prices), prices, error });
    });
  }, []);

  const set = (k) => (e) => {
    const value = e && e.currentTarget ? e.currentTarget.value : e;
    setV((old) => ({ ...old, [k]: value }));
    setEstimate(null);
  };
  const spot = v.tier === 'spot';
  const command = useMemo(() => (v.command.trim() ? parseCommand(v.command) : null), [v.command]);

  const fail = (errs) => {
    setErrors(errs);
    requestAnimationFrame(() => {
      const first = Object.keys(errs)[0];
      const el = first ? document.querySelector(`[name="${first}"]`) : top.current;
      if (el && el.focus) el.focus();
    });
  };

  const doEstimate = async () => {
    const built = buildSpec({ ...v, command: v.command || 'true' });
    if (built.errors) return fail(built.errors);
    const body = { ...built.spec };
    if (!v.command.trim()) delete body.command;
    if (v.hours.trim()) body.hours = Number(v.hours);
    else if (!v.max_runtime.trim() && !v.max_cost.trim()) body.hours = 1;
    setBusy('estimate');
    setErrors({});
    try {
      setEstimate(await post('/v1/estimate', body));
    } catch (e) {
      fail(errorsFrom(e));
    } finally {
      setBusy('');
    }
  };

  const submit = async (e) => {
    e.preventDefault();
    const built = buildSpec(v);
    if (built.errors) return fail(built.errors);
    setBusy('submit');
    setErrors({});
    try {
      const job = await post('/v1/jobs', built.spec, { headers: { 'Idempotency-Key': key.current } });
      key.current = newKey();
      navigate(`/jobs/${encodeURIComponent(job.id)}`);
    } catch (err) {
      fail(errorsFrom(err));
    } finally {
      setBusy('');
    }
  };

  const text = (k, name, label, props = {}) => (
    <Field label={label} name={name} error={errors[name]} hint={props.hint}>
      {(a) => <input {...a} value={v[k]} onInput={set(k)} data-testid={`spec-${k}`} {...props.input} />}
    </Field>
  );
  const readOnly = session.kind === 'user' && session.scope === 'read';

  return (
    <form onSubmit={submit} class="spec-form" data-testid="new-job-form" noValidate>
      <div ref={top} tabIndex={-1}>
        <ErrorNote error={errors['']} testid="form-error" />
        <ErrorNote error={offer.error && `Could not read the offer: ${offer.error.message}`} />
      </div>
      <div class="grid2">
        {text('name', 'name', 'Name', { input: { placeholder: 'train-resnet', maxLength: 128 } })}
        {text('image', 'image', 'Image', { hint: '"host" runs on the agent\'s own system, in its sandbox' })}
      </div>
      <Field
        label="Command"
        name="command"
        error={errors.command || (command && command.error)}
        hint={
          command && command.command
            ? Array.isArray(command.command)
              ? `Runs ${JSON.stringify(command.command)}`
              : `Runs with /bin/sh -c: ${command.command}`
            : 'One line, quoted as in a shell, or a JSON array: ["python3", "train.py"]'
        }
      >
        {(a) => (
          <input
            {...a}
            class="mono"
            value={v.command}
            onInput={set('command')}
            placeholder="python3 train.py --epochs 3"
            spellcheck={false}
            data-testid="spec-command"
          />
        )}
      </Field>
      <GpuPicker
        offer={offer.models}
        prices={offer.prices}
        value={v.gpu_type}
        onChange={set('gpu_type')}
        error={errors['resources.gpu_type']}
        spot={spot}
      />
      <div class="grid3">
        {text('gpu_count', 'resources.gpu_count', 'GPUs per node', {
          input: { type: 'number', min: 1, max: 64, inputMode: 'numeric' },
        })}
        {text('nodes', 'resources.nodes', 'Nodes', {
          input: { type: 'number', min: 1, max: 64, inputMode: 'numeric' },
        })}
        {text('gpu_memory', 'resources.gpu_memory', 'Min GPU memory', { input: { placeholder: '80GB' } })}
      </div>
      <fieldset class="tier" data-testid="spec-tier">
        <legend>Tier</legend>
        <label class="check">
          <input
            type="radio"
            name="tier"
            value="on-demand"
            checked={v.tier === 'on-demand'}
            onChange={() => set('tier')('on-demand')}
          />
          On-demand
        </label>
        <label class="check">
          <input
            type="radio"
            name="tier"
            value="spot"
            checked={v.tier === 'spot'}
            onChange={() => set('tier')('spot')}
          />
          Spot <span class="muted">(cheaper; yields to on-demand work with a notice and resumes)</span>
        </label>
        {errors.tier && <small class="field-error">{errors.tier}</small>}
      </fieldset>
      <div class="grid3">
        {text('max_runtime', 'max_runtime', 'Max runtime', {
          hint: '90s, 30m, 2h, 1h30m, 1d',
          input: { placeholder: '2h' },
        })}
        {text('max_cost', 'max_cost', 'Max cost (credits)', {
          input: { inputMode: 'decimal', placeholder: 'none' },
        })}
        {text('tags', 'tags', 'Tags', { hint: 'comma-separated', input: { placeholder: 'sweep, resnet' } })}
      </div>
      <Field
        label="Code"
        name="code"
        error={errors.code}
        hint="Unpacked into the job's work directory before the command starts. A folder leaves out .git and .tide."
      >
        {(a) => <CodeUpload value={v.code} onChange={set('code')} inputProps={a} />}
      </Field>
      <Field label="Environment" name="env" error={errors.env} hint="KEY=VALUE, one a line">
        {(a) => (
          <textarea
            {...a}
            class="mono"
            rows={3}
            value={v.env}
            onInput={set('env')}
            placeholder="WANDB_MODE=offline"
            spellcheck={false}
            data-testid="spec-env"
          />
        )}
      </Field>
      <div class="estimate-row">
        {text('hours', 'hours', 'Hours to estimate', {
          hint: 'default: the max runtime',
          input: { inputMode: 'decimal', placeholder: v.max_runtime ? v.max_runtime : '1' },
        })}
        <button type="button" onClick={doEstimate} disabled={!!busy} data-testid="estimate-button">
          {busy === 'estimate' ? 'Estimating…' : 'Estimate'}
        </button>
      </div>
      <Estimate estimate={estimate} />
      {readOnly && <p class="warning">This session's token has scope read: it may estimate, not submit.</p>}
      <div class="buttons">
        <button type="submit" class="primary" disabled={!!busy || readOnly} data-testid="submit-job">
          {busy === 'submit' ? 'Submitting…' : 'Submit'}
        </button>
      </div>
    </form>
  );
}

// A pasted or uploaded spec: JSON is posted as written; YAML and a Slurm
// batch script are turned into JSON by the server (POST /v1/convert, the
// CLI's own parsers) and then posted. A script travels in the job's code
// archive where the translated job runs it (`script_path`).
function SpecFile({ session }) {
  const [text, setText] = useState('');
  const [filename, setFilename] = useState('');
  const [error, setError] = useState(null);
  const [estimate, setEstimate] = useState(null);
  const [busy, setBusy] = useState('');
  const key = useRef(newKey());
  const kind = useMemo(() => classifySpecText(text), [text]);

  const load = async (e) => {
    const file = e.currentTarget.files && e.currentTarget.files[0];
    e.currentTarget.value = '';
    if (file) {
      setFilename(file.name);
      setText(await file.text());
    }
  };
  const report = (err) => setError(err.field && err.field !== 'text' ? `${err.field}: ${err.message}` : err.message);

  // What to post: {job} or {batch}, converted by the server when needed.
  const resolve = async () => {
    if (kind.kind === 'json-job') return { job: kind.value };
    if (kind.kind === 'json-batch') return { batch: kind.value };
    const format = kind.kind === 'sbatch' ? 'sbatch' : 'yaml';
    const name = filename || (format === 'sbatch' ? 'script.sh' : 'spec.yaml');
    const out = await post('/v1/convert', { format, text, filename: name });
    if (format !== 'sbatch') return out;
    // The job runs the script from its code archive: upload one holding it.
    const tar = tarBlob([{ path: out.script_path, file: new File([text], name), mode: 0o755 }]);
    const { blob, gzipped } = await gzipBlob(tar);
    const code = await request('POST', '/v1/code', {
      body: blob,
      headers: { 'Content-Type': gzipped ? 'application/gzip' : 'application/x-tar' },
    });
    if (out.job) out.job.code = code.id;
    if (out.batch) out.batch.template = { ...out.batch.template, code: code.id };
    return out;
  };

  const doEstimate = async () => {
    setBusy('estimate');
    setError(null);
    try {
      const { job } = await resolve();
      if (!job) throw new Error('a batch file has no single estimate: submit it, or estimate its template');
      setEstimate(await post('/v1/estimate', job));
    } catch (err) {
      report(err);
    } finally {
      setBusy('');
    }
  };
  const submit = async (e) => {
    e.preventDefault();
    if (!postable) return;
    setBusy('submit');
    setError(null);
    try {
      const headers = { 'Idempotency-Key': key.current };
      const { job, batch } = await resolve();
      if (batch) {
        const made = await post('/v1/batches', batch, { headers });
        navigate(`/batches/${encodeURIComponent(made.id)}`);
      } else {
        const made = await post('/v1/jobs', job, { headers });
        navigate(`/jobs/${encodeURIComponent(made.id)}`);
      }
      key.current = newKey();
    } catch (err) {
      report(err);
    } finally {
      setBusy('');
    }
  };

  const what = {
    empty: 'Paste a job spec or batch file (JSON or YAML), or a Slurm batch script, or load one.',
    'bad-json': `Not valid JSON: ${kind.error}`,
    'json-job': 'A JSON job spec: it is posted as written.',
    'json-batch': 'A JSON batch file (it has a template): it is posted as a batch.',
    yaml: 'YAML: the server reads it as tide submit FILE does (a batch file if it has a template), then it is posted.',
    sbatch: 'A Slurm batch script: the server translates its #SBATCH lines as tide sbatch does, and the script travels in the job\'s code.',
  }[kind.kind];
  const postable = kind.kind !== 'empty' && kind.kind !== 'bad-json';
  const readOnly = session.kind === 'user' && session.scope === 'read';

  return (
    <form onSubmit={submit} class="spec-form" data-testid="spec-file-form" noValidate>
      <ErrorNote error={error} testid="spec-file-error" />
      <div class="field">
        <label for="spec-text">Spec</label>
        <textarea
          id="spec-text"
          name="spec"
          class="mono"
          rows={16}
          value={text}
          onInput={(e) => {
            setText(e.currentTarget.value);
            setEstimate(null);
          }}
          spellcheck={false}
          placeholder={
            '{"name": "hello", "command": ["nvidia-smi"], "resources": {"gpu_type": "RTX4090", "gpu_count": 1}}'
          }
          aria-describedby="spec-kind"
          data-testid="spec-text"
        />
        <small
          id="spec-kind"
          class={kind.kind === 'bad-json' ? 'warning-text' : 'hint'}
          data-testid="spec-kind"
          data-kind={kind.kind}
        >
          {what}
        </small>
      </div>
      <div class="buttons">
        <label class="button file-button">
          Load a file…
          <input
            type="file"
            accept=".json,.yaml,.yml,.sh,.sbatch,.txt,application/json,text/plain"
            onChange={load}
            data-testid="spec-file"
          />
        </label>
        <button
          type="button"
          onClick={doEstimate}
          disabled={!postable || kind.kind === 'json-batch' || !!busy}
          data-testid="spec-file-estimate"
        >
          Estimate
        </button>
        <button
          type="submit"
          class="primary"
          disabled={!postable || !!busy || readOnly}
          data-testid="spec-file-submit"
        >
          {busy === 'submit' ? 'Submitting…' : kind.kind === 'json-batch' ? 'Submit batch' : 'Submit'}
        </button>
      </div>
      <Estimate estimate={estimate} />
    </form>
  );
}

export function NewJobPage({ session }) {
  const [tab, setTab] = useState('form');
  const tabs = [
    ['form', 'Form'],
    ['file', 'Spec file'],
  ];
  useEffect(() => {
    document.title = 'New job · Tide';
  }, []);
  // Arrow keys move between the tabs, as in any tab list.
  const onKey = (e) => {
    const i = tabs.findIndex(([k]) => k === tab);
    let n = -1;
    if (e.key === 'ArrowRight') n = (i + 1) % tabs.length;
    if (e.key === 'ArrowLeft') n = (i + tabs.length - 1) % tabs.length;
    if (n < 0) return;
    e.preventDefault();
    setTab(tabs[n][0]);
    document.getElementById(`tab-${tabs[n][0]}`).focus();
  };
  return (
    <>
      <h1>New job</h1>
      <div role="tablist" aria-label="How to write the job" class="tabs" onKeyDown={onKey}>
        {tabs.map(([k, label]) => (
          <button
            key={k}
            type="button"
            role="tab"
            id={`tab-${k}`}
            aria-selected={tab === k ? 'true' : 'false'}
            aria-controls={`panel-${k}`}
            tabIndex={tab === k ? 0 : -1}
            onClick={() => setTab(k)}
            data-testid={`tab-${k}`}
          >
            {label}
          </button>
        ))}
      </div>
      <div role="tabpanel" id={`panel-${tab}`} aria-labelledby={`tab-${tab}`}>
        {tab === 'form' ? <SpecForm session={session} /> : <SpecFile session={session} />}
      </div>
    </>
  );
}
