// The console's paths, on the History API: /jobs, /jobs/{id}, /new,
// /batches, /batches/{id}, /account, /provider, /operator. The server
// answers every one of them with index.html; the page picks what to show.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';

const listeners = new Set();

function snapshot() {
  return { path: location.pathname, search: location.search };
}

function notify() {
  const loc = snapshot();
  for (const fn of listeners) fn(loc);
}

window.addEventListener('popstate', notify);

// Goes to `to` ("/jobs/j-1", "/jobs?status=queued"). `replace` rewrites the
// current history entry instead (filters typed into a form).
export function navigate(to, { replace = false } = {}) {
  const here = location.pathname + location.search;
  if (to === here) return;
  history[replace ? 'replaceState' : 'pushState'](null, '', to);
  notify();
  if (!replace) window.scrollTo(0, 0);
}

// The current {path, search}, re-rendering the caller when it changes.
export function useLocation() {
  const [loc, setLoc] = useState(snapshot);
  useEffect(() => {
    listeners.add(setLoc);
    return () => listeners.delete(setLoc);
  }, []);
  return loc;
}

// Matches "/jobs/:id" against "/jobs/j-1" → {id: "j-1"}, or null.
export function match(pattern, path) {
  const p = pattern.split('/').filter(Boolean);
  const s = path.split('/').filter(Boolean);
  if (p.length !== s.length) return null;
  const params = {};
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(':')) {
      try {
        params[p[i].slice(1)] = decodeURIComponent(s[i]);
      } catch {
        return null;
      }
    } else if (p[i] !== s[i]) {
      return null;
    }
  }
  return params;
}

// A link inside the console: a real <a href>, so it opens in a new tab
// with a modifier key and reads as a link, but a plain click stays in the page.
export function Link({ href, children, ...props }) {
  const onClick = (e) => {
    if (props.onClick) props.onClick(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(href);
  };
  return h('a', { ...props, href, onClick }, children);
}
