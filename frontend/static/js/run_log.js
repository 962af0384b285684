// The run page's log panel: the end of the run's log first, then new lines every 2 s while the run is
// queued or running (read from the status badge that run_detail.js keeps current). Text only: the log is
// set with textContent, never parsed as HTML. It scrolls with new lines unless the reader scrolled up.
(() => {
  "use strict";
  const panel = document.getElementById("run-log-panel");
  if (!panel) return;
  const pre = document.getElementById("run-log");
  const empty = document.getElementById("run-log-empty");
  const size = document.getElementById("run-log-size");
  const badge = document.getElementById("run-status");
  const url = panel.dataset.url;
  const KEEP_CHARS = 2_000_000; // the page keeps the last 2 M characters; the download has everything
  let offset = null;
  let finalReads = 0;

  const live = () => ["queued", "running"].includes(badge.dataset.status);
  function kib(bytes) { return bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(bytes < 10240 ? 1 : 0)} KiB`; }

  async function poll() {
    const query = offset === null ? "tail=65536" : `offset=${offset}`;
    let behind = false;
    try {
      const response = await fetch(`${url}?${query}`, { headers: { Accept: "application/json" } });
      if (response.ok) {
        const chunk = await response.json();
        show(chunk);
        behind = chunk.exists && chunk.text !== "" && chunk.next_offset < chunk.size;
      }
    } catch (e) { /* offline for a moment: the next poll tries again */ }
    if (behind) return poll(); // more than one chunk behind: catch up at once
    if (live()) finalReads = 0; else finalReads += 1;
    if (finalReads < 2) setTimeout(poll, 2000); // after the end, one more read for the last lines
  }
  function show(chunk) {
    if (!chunk.exists) return;
    if (offset !== null && chunk.offset < offset) pre.textContent = ""; // the log was started over
    const atEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
    if (chunk.text) {
      let text = pre.textContent + chunk.text;
      if (text.length > KEEP_CHARS) text = text.slice(text.length - KEEP_CHARS);
      pre.textContent = text;
    }
    offset = chunk.next_offset;
    empty.hidden = true;
    size.textContent = `(${kib(chunk.size)})`;
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }
  poll();
})();
