// The login page: an API token (a user's tide_u_… or the admin's tide_a_…)
// is exchanged for a session cookie (POST /v1/session). The one-time link
// `tide dev` prints (/login?code=…) logs in without it: the server sets the
// cookie and sends the browser to /.
import { useEffect, useRef, useState } from 'preact/hooks';
import { session } from '../api.js';
import { ErrorNote } from '../ui.jsx';

export function LoginPage({ onLogin }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const input = useRef(null);

  useEffect(() => {
    document.title = 'Log in · Tide';
    if (input.current) input.current.focus();
    // The server sends a spent or expired one-time link here.
    if (new URLSearchParams(location.search).get('error') === 'link') {
      setError('That login link has expired or was used already: ask for a new one (tide dev prints one), or paste a token.');
    }
  }, []);

  const submit = async (e) => {
    e.preventDefault();
    const t = token.trim();
    if (!t) {
      setError('Paste your API token first.');
      return;
    }
    if (/^tide_[jn]_/.test(t)) {
      setError('That is an agent token; log in with a user token (tide_u_…) or the admin token (tide_a_…).');
      return;
    }
    setBusy(true);
    setError(null);
    try {
      const s = await session.login(t);
      setToken('');
      onLogin(s);
    } catch (err) {
      setError(err.status === 401 ? `That token does not work: ${err.message}` : err);
      if (input.current) input.current.select();
    } finally {
      setBusy(false);
    }
  };

  return (
    <main class="login" id="main">
      <form class="card" onSubmit={submit} data-testid="login-form" aria-labelledby="login-title">
        <h1 id="login-title">Log in to Tide</h1>
        <div class="field">
          <label for="login-token">API token</label>
          <input
            id="login-token"
            ref={input}
            name="token"
            type="password"
            autocomplete="off"
            spellcheck={false}
            placeholder="tide_u_…"
            value={token}
            onInput={(e) => setToken(e.currentTarget.value)}
            aria-describedby="login-hint"
            data-testid="login-token"
          />
          <small id="login-hint" class="hint">
            A user token (<code>tide admin user add NAME</code> prints one) or the admin token.
          </small>
        </div>
        <ErrorNote error={error} testid="login-error" />
        <button type="submit" class="primary" disabled={busy} data-testid="login-submit">
          {busy ? 'Logging in…' : 'Log in'}
        </button>
        <p class="muted">
          or open the login link <code>tide dev</code> printed.
        </p>
      </form>
    </main>
  );
}
