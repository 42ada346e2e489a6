// The job's code: an archive uploaded with POST /v1/code, whose id goes in
// the spec's `code` field. The user picks a .tar.gz / .tgz / .tar file, or
// a folder, which is packed here (src/tar.js), or pastes the id of an
// archive uploaded before.
import { useState } from 'preact/hooks';
import { request } from '../api.js';
import { bytes } from '../format.js';
import { folderEntries, gzipBlob, tarBlob } from '../tar.js';

const MAX_UPLOAD = 256 * 1024 * 1024; // the server's limit for a code archive

async function upload(blob, gzipped) {
  if (blob.size > MAX_UPLOAD) {
    throw new Error(`the archive is ${bytes(blob.size)}; the server takes at most ${bytes(MAX_UPLOAD)}`);
  }
  return request('POST', '/v1/code', {
    body: blob,
    headers: { 'Content-Type': gzipped ? 'application/gzip' : 'application/x-tar' },
  });
}

export function CodeUpload({ value, onChange, inputProps }) {
  const [busy, setBusy] = useState('');
  const [note, setNote] = useState('');
  const [uploadError, setUploadError] = useState('');

  const run = async (what, make) => {
    setBusy(what);
    setUploadError('');
    setNote('');
    try {
      const { blob, gzipped, files } = await make();
      const answer = await upload(blob, gzipped);
      onChange(answer.id);
      setNote(`Uploaded ${files ? `${files} files, ` : ''}${bytes(answer.size)}.`);
    } catch (e) {
      setUploadError(e.message);
    } finally {
      setBusy('');
    }
  };

  const pickArchive = (e) => {
    const file = e.currentTarget.files && e.currentTarget.files[0];
    e.currentTarget.value = '';
    if (!file) return;
    const gzipped = /\.(tar\.gz|tgz)$/i.test(file.name);
    if (!gzipped && !/\.tar$/i.test(file.name)) {
      setUploadError('Pick a .tar.gz, .tgz or .tar archive (zip is not taken), or a folder.');
      return;
    }
    run('archive', async () => ({ blob: file, gzipped }));
  };

  const pickFolder = (e) => {
    const entries = folderEntries(e.currentTarget.files || []);
    e.currentTarget.value = '';
    if (!entries.length) {
      setUploadError('That folder has no files to upload.');
      return;
    }
    run('folder', async () => {
      const packed = await gzipBlob(tarBlob(entries));
      return { ...packed, files: entries.length };
    });
  };

  return (
    <div class="code-upload">
      <input
        {...inputProps}
        value={value}
        placeholder="64 hex characters, or upload below"
        spellcheck={false}
        onInput={(e) => onChange(e.currentTarget.value)}
        class="mono"
        data-testid="spec-code"
      />
      <div class="upload-buttons">
        <label class="button file-button">
          Upload archive…
          <input
            type="file"
            accept=".tar,.tar.gz,.tgz,application/gzip,application/x-tar"
            onChange={pickArchive}
            disabled={!!busy}
            data-testid="code-archive"
          />
        </label>
        <label class="button file-button">
          Upload folder…
          <input
            type="file"
            webkitdirectory={true}
            multiple
            onChange={pickFolder}
            disabled={!!busy}
            data-testid="code-folder"
          />
        </label>
        {busy && (
          <span role="status" class="muted">
            Uploading the {busy}…
          </span>
        )}
        {note && !busy && (
          <span role="status" class="ok" data-testid="code-uploaded">
            {note}
          </span>
        )}
      </div>
      {uploadError && (
        <small class="field-error" role="alert" data-testid="code-upload-error">
          {uploadError}
        </small>
      )}
    </div>
  );
}
