// The websocket of a run (/ws/runs/<id>/), shared by the run page and the inspector.
//
// A dropped connection (daphne or Redis restarting: the server closes the socket) shows "reconnecting…"
// and retries after a delay that doubles from 0.5 s to 5 s, jittered (×0.75–1.25) so that many open pages
// do not all come back at once. The delay resets only when a snapshot arrives: the server accepts a socket
// before it checks anything, so an open socket may still be closed at once (Redis still away). Each retry
// asks for ?after=<last step>; the snapshot brings what was missed, from the database. Close codes 4001
// (not logged in) and 4004 (no such run, or not yours) are final: the page says "no access" and stops.
// While the run is queued or running the indicator says "live"; once it has ended it says "connected"
// (grey): nothing streams unless the run is resumed, which turns it back to "live".
//
// Benchmark hooks (bench/ws_latency.py, bench/page_load.py, bench/inspect_scale.py) are recorded only when
// localStorage "dapo.bench" is "1"; a normal page records nothing.
(() => {
  "use strict";
  const BACKOFF_MIN_MS = 500, BACKOFF_MAX_MS = 5000;
  const FINAL_CODES = new Set([4001, 4004]);
  const ENDED = new Set(["succeeded", "failed", "cancelled"]);
  let bench = false;
  try { bench = window.localStorage.getItem("dapo.bench") === "1"; } catch (e) { bench = false; }

  function indicator(el) {
    return (text, state) => { if (el) { el.textContent = text; el.dataset.state = state; } };
  }

  // connect({runId, after: () => step, onEvent: (ev, socket) => void, indicator: element})
  // returns {send(obj)}; onEvent gets every parsed message.
  function connect(options) {
    const setLive = indicator(options.indicator);
    let backoff = BACKOFF_MIN_MS, socket = null, connected = false;
    function showState(run) {
      if (!connected || !run || !run.status) return;
      if (ENDED.has(run.status)) setLive("connected", "idle");
      else setLive("live", "live");
    }
    function open() {
      const proto = location.protocol === "https:" ? "wss" : "ws";
      socket = new WebSocket(`${proto}://${location.host}/ws/runs/${options.runId}/?after=${options.after()}`);
      socket.onmessage = (e) => {
        const ev = JSON.parse(e.data);
        if (ev.type === "snapshot") { backoff = BACKOFF_MIN_MS; connected = true; setLive("live", "live"); }
        showState(ev.run);
        options.onEvent(ev, socket);
      };
      socket.onclose = (e) => {
        connected = false;
        if (FINAL_CODES.has(e.code)) { setLive("no access", "off"); return; }
        setLive("reconnecting…", "wait");
        setTimeout(open, backoff * (0.75 + Math.random() / 2));
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      };
    }
    open();
    return { send: (message) => { if (socket && socket.readyState === 1) socket.send(JSON.stringify(message)); } };
  }

  // mark(name, value): a benchmark hook, set only when opted in.
  function mark(name, value) { if (bench) window[name] = value; }
  // record(name, key, value): window[name][key] = value, only when opted in.
  function record(name, key, value) {
    if (!bench) return;
    (window[name] = window[name] || {})[key] = value;
  }

  window.dapoLive = { connect, indicator, mark, record, BACKOFF_MIN_MS, BACKOFF_MAX_MS };
})();
