// Tide's web console: the page `tide server` serves at / and every console
// path. It asks for the session (the cookie's), shows the login page
// without one, and otherwise the navigation bar and the page of the path.
import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import './style.css';
import { session as sessionApi, setSession, stopWatching, watchJobs, whenUnauthenticated } from './api.js';
import { Link, match, navigate, useLocation } from './router.js';
import { ErrorNote, Loading } from './ui.jsx';
import { LoginPage } from './pages/login.jsx';
import { JobsPage } from './pages/jobs.jsx';
import { JobPage } from './pages/job.jsx';
import { NewJobPage } from './pages/new_job.jsx';
import { BatchesPage, BatchPage } from './pages/batches.jsx';
import { AccountPage } from './pages/account.jsx';
import { ProviderPage } from './pages/provider.jsx';
import { OperatorPage } from './pages/operator.jsx';

const ROUTES = [
  ['/jobs', JobsPage],
  ['/jobs/:id', JobPage],
  ['/new', NewJobPage],
  ['/batches', BatchesPage],
  ['/batches/:id', BatchPage],
  ['/account', AccountPage],
  ['/provider', ProviderPage],
  ['/operator', OperatorPage],
];

const NAV = [
  ['/jobs', 'Jobs'],
  ['/new', 'New job'],
  ['/batches', 'Batches'],
  ['/account', 'Account'],
  ['/provider', 'Provider'],
];

function NotFoundPage() {
  return (
    <>
      <h1>Page not found</h1>
      <p>
        <Link href="/jobs">Go to your jobs</Link>
      </p>
    </>
  );
}

// "live" while the event stream is open, "refreshing every 3 s" while it is down.
function LiveIndicator() {
  const [mode, setMode] = useState('connecting');
  useEffect(() => watchJobs({ onMode: setMode }), []);
  const text = mode === 'live' ? 'live' : mode === 'polling' ? 'refreshing every 3 s' : 'connecting';
  return (
    <span class={`live live-${mode}`} data-testid="live-mode" title="Job updates">
      {text}
    </span>
  );
}

function Shell({ session, onLogout }) {
  const { path } = useLocation();
  const main = useRef(null);
  const previous = useRef(null);
  const [logoutError, setLogoutError] = useState(null);

  useEffect(() => {
    if (path === '/' || path === '/login') navigate('/jobs', { replace: true });
  }, [path]);
  // After a navigation, focus moves to the new page (screen readers read
  // it); not on the first page shown, nor on the redirect from /.
  useEffect(() => {
    const from = previous.current;
    previous.current = path;
    if (from === null || from === '/' || from === '/login') return;
    if (main.current) main.current.focus({ preventScroll: true });
  }, [path]);

  let page = null;
  for (const [pattern, Page] of ROUTES) {
    const params = match(pattern, path);
    if (params) {
      page = <Page key={pattern + (params.id || '')} params={params} session={session} />;
      break;
    }
  }
  if (!page && path !== '/' && path !== '/login') page = <NotFoundPage />;

  const logout = async () => {
    try {
      await sessionApi.logout();
      onLogout();
    } catch (e) {
      if (e.status === 401) onLogout();
      else setLogoutError(e);
    }
  };

  const nav = session.kind === 'admin' ? [...NAV, ['/operator', 'Operator']] : NAV;
  const section = '/' + (path.split('/')[1] || '');
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <Link href="/jobs" class="brand" aria-label="Tide home">
          Tide
        </Link>
        <nav aria-label="Main">
          <ul>
            {nav.map(([href, label]) => (
              <li key={href}>
                <Link
                  href={href}
                  aria-current={section === href ? 'page' : undefined}
                  data-testid={`nav-${href.slice(1)}`}
                >
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          <LiveIndicator />
          <span data-testid="session-user">{session.user}</span>
          <span class="kind" data-testid="session-kind">
            {session.kind}
            {session.kind === 'user' && session.scope && session.scope !== 'full'
              ? ` · ${session.scope}`
              : ''}
          </span>
          <button type="button" onClick={logout} data-testid="logout">
            Log out
          </button>
        </div>
      </header>
      <ErrorNote error={logoutError} />
      <main id="main" ref={main} tabIndex={-1}>
        {page}
      </main>
    </>
  );
}

function App() {
  const [session, setSess] = useState(undefined); // undefined: asking; null: none
  const [bootError, setBootError] = useState(null);

  const adopt = (s) => {
    setSession(s);
    setSess(s);
  };
  const check = () => {
    setBootError(null);
    sessionApi.current().then(adopt, setBootError);
  };
  useEffect(() => {
    whenUnauthenticated(() => {
      stopWatching();
      adopt(null);
    });
    check();
  }, []);
  // The session ends at expires_at; the login page comes back then.
  useEffect(() => {
    if (!session || !session.expires_at) return undefined;
    const ms = session.expires_at - Date.now();
    if (ms > 2 ** 31 - 1) return undefined;
    const t = setTimeout(check, Math.max(0, ms) + 1000);
    return () => clearTimeout(t);
  }, [session]);

  if (session === undefined) {
    if (!bootError) return <Loading what="Starting Tide" />;
    return (
      <main class="boot">
        <ErrorNote error={bootError} />
        <button type="button" onClick={check}>
          Try again
        </button>
      </main>
    );
  }
  if (!session) {
    return (
      <LoginPage
        onLogin={(s) => {
          adopt(s);
          if (location.pathname === '/' || location.pathname === '/login')
            navigate('/jobs', { replace: true });
        }}
      />
    );
  }
  return (
    <Shell
      session={session}
      onLogout={() => {
        stopWatching();
        adopt(null);
        navigate('/', { replace: true });
      }}
    />
  );
}

render(<App />, document.getElementById('app'));
