// Turns what the New job form holds into a job spec (docs/spec.md), and a
// server error's `field` into the form input it is about.

// Characters that mean something to a shell when they are not quoted;
// # and ~ only at the start of a word.
const SHELL_CHARS = new Set('|&;<>()$`*?[]{}\n'.split(''));
const WORD_START_CHARS = new Set(['#', '~']);

// Reads a one-line command. A JSON array ("["python3", "train.py"]") is the
// argv as written. Otherwise the line is split into words the way a shell
// would for simple quoting ('…' literal, "…" with \" \\ \$ \` escapes, \x);
// a line that needs a shell (pipes, &&, $VAR, globs, redirections) is sent
// as one string, which the server runs with /bin/sh -c.
// Returns {command} (an array or a string) or {error}.
export function parseCommand(text) {
  const line = text.trim();
  if (!line) return { error: 'is required' };
  if (line.startsWith('[')) {
    let v;
    try {
      v = JSON.parse(line);
    } catch {
      return { error: 'starts with [ but is not a JSON array' };
    }
    if (!Array.isArray(v) || v.length === 0 || !v.every((s) => typeof s === 'string')) {
      return { error: 'must be a non-empty JSON array of strings' };
    }
    return { command: v };
  }
  const words = [];
  let word = '';
  let inWord = false;
  let needsShell = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) return { error: 'has an unclosed single quote' };
      word += line.slice(i + 1, end);
      i = end;
      inWord = true;
    } else if (c === '"') {
      inWord = true;
      for (i++; i < line.length && line[i] !== '"'; i++) {
        if (line[i] === '\\' && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) {
          word += line[++i];
        } else {
          if (line[i] === '$' || line[i] === '`') needsShell = true;
          word += line[i];
        }
      }
      if (i >= line.length) return { error: 'has an unclosed double quote' };
    } else if (c === '\\') {
      if (i + 1 < line.length) word += line[++i];
      inWord = true;
    } else if (c === ' ' || c === '\t') {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      if (SHELL_CHARS.has(c) || (!inWord && WORD_START_CHARS.has(c))) needsShell = true;
      word += c;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  if (needsShell) return { command: line };
  if (!words.length || !words[0]) return { error: 'must name a program' };
  return { command: words };
}

// KEY=VALUE lines into an object; blank lines and # comments are skipped.
// The value is everything after the first "=", as written.
export function parseEnv(text) {
  const env = {};
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n].replace(/\r$/, '');
    if (!line.trim() || line.trim().startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) return { error: `line ${n + 1} is not KEY=VALUE` };
    env[line.slice(0, eq).trim()] = line.slice(eq + 1);
  }
  return { env };
}

// Comma-separated words into a list, without empties.
export function splitList(text) {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

// The form input a server error is about: `field` itself when the form has
// an input of that name, else its nearest parent that it has
// ("env.FOO" → "env", "command[1]" → "command"); "" when none (the error
// then shows at the top of the form).
export function inputFor(field, names) {
  let f = field || '';
  while (f) {
    if (names.includes(f)) return f;
    const cut = Math.max(f.lastIndexOf('.'), f.lastIndexOf('['));
    if (cut <= 0) break;
    f = f.slice(0, cut);
  }
  return '';
}

// Form values → {spec} or {errors: {input: message}}. Values are strings
// as the inputs hold them; empty ones are left out so the server's
// defaults apply.
export function buildSpec(v) {
  const errors = {};
  const spec = {};
  if (v.name.trim()) spec.name = v.name.trim();
  if (v.image.trim()) spec.image = v.image.trim();
  const cmd = parseCommand(v.command);
  if (cmd.error) errors.command = cmd.error;
  else spec.command = cmd.command;

  const resources = {};
  if (v.gpu_type && v.gpu_type !== 'any') resources.gpu_type = v.gpu_type;
  if (v.gpu_count !== '') {
    const n = Number(v.gpu_count);
    if (!Number.isInteger(n)) errors['resources.gpu_count'] = 'must be a whole number';
    else resources.gpu_count = n;
  }
  if (v.nodes !== '' && Number(v.nodes) !== 1) {
    const n = Number(v.nodes);
    if (!Number.isInteger(n)) errors['resources.nodes'] = 'must be a whole number';
    else resources.nodes = n;
  }
  if (v.gpu_memory.trim()) resources.gpu_memory = v.gpu_memory.trim();
  if (Object.keys(resources).length) spec.resources = resources;

  if (v.max_runtime.trim()) spec.max_runtime = v.max_runtime.trim();
  if (v.max_cost.trim()) {
    const n = Number(v.max_cost);
    if (!Number.isFinite(n)) errors.max_cost = 'must be a number';
    else spec.max_cost = n;
  }
  if (v.tier) spec.tier = v.tier;
  if (v.code.trim()) spec.code = v.code.trim();
  const tags = splitList(v.tags);
  if (tags.length) spec.tags = tags;
  const env = parseEnv(v.env);
  if (env.error) errors.env = env.error;
  else if (Object.keys(env.env).length) spec.env = env.env;
  return Object.keys(errors).length ? { errors } : { spec };
}

// What a pasted or uploaded spec is: 'json-job', 'json-batch', 'sbatch',
// 'yaml' or 'empty'; with the parsed object for JSON.
export function classifySpecText(text) {
  const t = text.trim();
  if (!t) return { kind: 'empty' };
  if (t.startsWith('{')) {
    let obj;
    try {
      obj = JSON.parse(t);
    } catch (e) {
      return { kind: 'bad-json', error: e.message };
    }
    if (obj && typeof obj === 'object' && !Array.isArray(obj) && 'template' in obj) {
      return { kind: 'json-batch', value: obj };
    }
    return { kind: 'json-job', value: obj };
  }
  if (t.startsWith('#!') || /^#SBATCH/m.test(t)) return { kind: 'sbatch' };
  return { kind: 'yaml' };
}
