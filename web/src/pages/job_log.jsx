// A job's log, live: GET /v1/jobs/{id}/logs?follow=true streams stdout and
// stderr as the agent ships them and ends when the job (or the attempt
// picked) ends; following the current attempt, it prints "--- attempt N ---"
// when the job moves on. Text is appended to the box as it arrives, at most
// once a frame; past MAX_CHARS the oldest text is dropped from view (the
// download link has all of it).
import { useEffect, useRef, useState } from 'preact/hooks';
import { streamText, withQuery } from '../api.js';
import { isEnded } from '../format.js';

const MAX_CHARS = 4 * 1024 * 1024;
const RECONNECT_MS = 3000;

export function LogView({ job }) {
  const [attempt, setAttempt] = useState(''); // '' = the current one, followed across attempts
  const [rank, setRank] = useState(0);
  const [follow, setFollow] = useState(true);
  const [state, setState] = useState('connecting'); // connecting | streaming | ended | error
  const [error, setError] = useState('');
  const [trimmed, setTrimmed] = useState(false);
  const [restarts, setRestarts] = useState(0);
  const box = useRef(null);
  const followRef = useRef(follow);
  followRef.current = follow;
  const endedRef = useRef(isEnded(job.status));
  endedRef.current = isEnded(job.status);

  const id = job.id;
  const nodes = (job.resources && job.resources.nodes) || 1;
  const attempts = Math.max(1, job.attempt || 1);

  useEffect(() => {
    const pre = box.current;
    pre.textContent = '';
    setTrimmed(false);
    setError('');
    setState('connecting');
    const controller = new AbortController();
    let pending = '';
    let frame = 0;
    let shown = 0;
    let retry = null;

    const flush = () => {
      frame = 0;
      if (!pending) return;
      const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
      pre.appendChild(document.createTextNode(pending));
      shown += pending.length;
      pending = '';
      while (shown > MAX_CHARS && pre.firstChild && pre.firstChild !== pre.lastChild) {
        shown -= pre.firstChild.textContent.length;
        pre.removeChild(pre.firstChild);
        setTrimmed(true);
      }
      if (followRef.current && (atBottom || shown < 4096)) pre.scrollTop = pre.scrollHeight;
    };
    const onText = (text) => {
      pending += text;
      if (!frame) frame = requestAnimationFrame(flush);
    };

    const path = withQuery(`/v1/jobs/${encodeURIComponent(id)}/logs`, {
      follow: 'true',
      attempt,
      rank: nodes > 1 ? rank : '',
    });
    setState('streaming');
    streamText(path, onText, controller.signal).then(
      () => {
        flush();
        // A stream that ends while the job still runs was cut (a restart,
        // a proxy): read it again from the start.
        if (!attempt && !endedRef.current) {
          retry = setTimeout(() => setRestarts((n) => n + 1), RECONNECT_MS);
          setState('reconnecting');
        } else {
          setState('ended');
        }
      },
      (e) => {
        if (e.name === 'AbortError') return;
        flush();
        setError(e.message);
        setState('error');
      },
    );
    return () => {
      controller.abort();
      if (frame) cancelAnimationFrame(frame);
      clearTimeout(retry);
    };
  }, [id, attempt, rank, restarts]);

  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [follow]);

  const download = withQuery(`/v1/jobs/${encodeURIComponent(id)}/logs`, {
    attempt: attempt || job.attempt || '',
    rank: nodes > 1 ? rank : '',
  });
  const stateText = {
    connecting: 'connecting…',
    streaming: attempt ? `attempt ${attempt}` : 'following',
    reconnecting: 'stream ended early; reconnecting…',
    ended: 'end of log',
    error: `could not read the log: ${error}`,
  }[state];

  return (
    <section aria-labelledby="log-title" class="panel">
      <div class="panel-head">
        <h2 id="log-title">Log</h2>
        <div class="controls">
          <label for="log-attempt">Attempt</label>
          <select
            id="log-attempt"
            value={attempt}
            onChange={(e) => setAttempt(e.currentTarget.value)}
            data-testid="log-attempt"
          >
            <option value="">Current (follow)</option>
            {Array.from({ length: attempts }, (_, i) => i + 1).map((n) => (
              <option key={n} value={String(n)}>
                {n}
              </option>
            ))}
          </select>
          {nodes > 1 && (
            <>
              <label for="log-rank">Rank</label>
              <select
                id="log-rank"
                value={rank}
                onChange={(e) => setRank(Number(e.currentTarget.value))}
                data-testid="log-rank"
              >
                {Array.from({ length: nodes }, (_, i) => i).map((r) => (
                  <option key={r} value={r}>
                    {r}
                  </option>
                ))}
              </select>
            </>
          )}
          <label class="check">
            <input
              type="checkbox"
              checked={follow}
              onChange={(e) => setFollow(e.currentTarget.checked)}
              data-testid="log-follow"
            />
            Scroll with output
          </label>
          <a href={download} download={`${id}.log`} data-testid="log-download">
            Download
          </a>
        </div>
      </div>
      <p
        class={`log-state${state === 'error' ? ' error' : ''}`}
        data-testid="log-state"
        data-state={state}
        aria-live="polite"
      >
        {stateText}
      </p>
      {trimmed && <p class="muted">Earlier output is not shown here; the download has all of it.</p>}
      <pre ref={box} class="log" data-testid="log" tabIndex={0} aria-label="Job log" />
    </section>
  );
}
