// Packs a folder picked in the browser (<input type=file webkitdirectory>)
// as the code archive POST /v1/code takes: a tar (ustar, with a pax header
// for a path too long for ustar) of regular files and their directories,
// gzip-compressed where the browser can (CompressionStream); the server
// also reads an uncompressed tar.
//
// Like `tide submit --code DIR`, it leaves out .git at any depth and a
// top-level .tide; unlike it, it does not read .gitignore.

const BLOCK = 512;
const encoder = new TextEncoder();

function octal(n, width) {
  // width - 1 digits and a NUL, as ustar writes numbers.
  return n.toString(8).padStart(width - 1, '0') + '\0';
}

function put(buf, offset, text, width) {
  const b = encoder.encode(text);
  buf.set(b.subarray(0, width), offset);
}

// Splits a path into ustar's prefix (155 bytes) and name (100 bytes), or
// returns null when it needs a pax header.
function ustarName(path) {
  const len = encoder.encode(path).length;
  if (len <= 100) return { prefix: '', name: path };
  for (let i = path.indexOf('/'); i > 0; i = path.indexOf('/', i + 1)) {
    const prefix = path.slice(0, i);
    const name = path.slice(i + 1);
    if (encoder.encode(prefix).length <= 155 && encoder.encode(name).length <= 100 && name) {
      return { prefix, name };
    }
  }
  return null;
}

function header({ name, prefix = '', size, mode, type, mtime }) {
  const h = new Uint8Array(BLOCK);
  put(h, 0, name, 100);
  put(h, 100, octal(mode, 8), 8);
  put(h, 108, octal(0, 8), 8); // uid
  put(h, 116, octal(0, 8), 8); // gid
  put(h, 124, octal(size, 12), 12);
  put(h, 136, octal(mtime, 12), 12);
  put(h, 148, '        ', 8); // checksum, counted as spaces
  put(h, 156, type, 1);
  put(h, 257, 'ustar\0', 6);
  put(h, 263, '00', 2);
  put(h, 345, prefix, 155);
  let sum = 0;
  for (const b of h) sum += b;
  put(h, 148, sum.toString(8).padStart(6, '0') + '\0 ', 8);
  return h;
}

function padding(size) {
  const rest = size % BLOCK;
  return rest ? new Uint8Array(BLOCK - rest) : null;
}

// A pax record "LEN path=VALUE\n", LEN counting itself.
function paxRecord(key, value) {
  const body = ` ${key}=${value}\n`;
  const bodyLen = encoder.encode(body).length;
  let len = bodyLen + 1;
  while (String(len).length + bodyLen !== len) len = String(len).length + bodyLen;
  return encoder.encode(`${len}${body}`);
}

function entry(parts, path, { size, mode, type, mtime }) {
  const split = ustarName(path);
  if (split) {
    parts.push(header({ ...split, size, mode, type, mtime }));
    return;
  }
  const pax = paxRecord('path', path);
  parts.push(header({ name: 'PaxHeader', size: pax.length, mode: 0o644, type: 'x', mtime }));
  parts.push(pax);
  const pad = padding(pax.length);
  if (pad) parts.push(pad);
  const short = encoder.encode(path).subarray(0, 100);
  parts.push(
    header({ name: new TextDecoder().decode(short).replace(/\uFFFD+$/, ''), size, mode, type, mtime }),
  );
}

function leftOut(rel) {
  const segs = rel.split('/');
  return segs.includes('.git') || segs[0] === '.tide';
}

// The files of a picked folder, by their path below it, without what is
// left out. `files`: the input's FileList (each with webkitRelativePath
// "folder/sub/a.py"; the first segment is the folder itself).
export function folderEntries(files) {
  const out = [];
  for (const f of files) {
    const rel = (f.webkitRelativePath || f.name).split('/').slice(1).join('/');
    if (!rel || leftOut(rel)) continue;
    out.push({ path: rel, file: f });
  }
  out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return out;
}

// A Blob holding the tar of `entries` ({path, file, mode?}: 0644 unless
// given), its directories first.
export function tarBlob(entries) {
  const parts = [];
  const now = Math.floor(Date.now() / 1000);
  const dirs = new Set();
  for (const { path } of entries) {
    const segs = path.split('/');
    for (let i = 1; i < segs.length; i++) dirs.add(segs.slice(0, i).join('/'));
  }
  for (const d of [...dirs].sort()) {
    entry(parts, `${d}/`, { size: 0, mode: 0o755, type: '5', mtime: now });
  }
  for (const { path, file, mode } of entries) {
    const mtime = Math.floor((file.lastModified || Date.now()) / 1000);
    entry(parts, path, { size: file.size, mode: mode || 0o644, type: '0', mtime });
    parts.push(file);
    const pad = padding(file.size);
    if (pad) parts.push(pad);
  }
  parts.push(new Uint8Array(BLOCK * 2)); // end of archive
  return new Blob(parts, { type: 'application/x-tar' });
}

// Gzips a Blob when the browser has CompressionStream; else returns it as is.
export async function gzipBlob(blob) {
  if (typeof CompressionStream === 'undefined') return { blob, gzipped: false };
  const stream = blob.stream().pipeThrough(new CompressionStream('gzip'));
  return { blob: await new Response(stream).blob(), gzipped: true };
}
