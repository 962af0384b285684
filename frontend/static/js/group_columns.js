// A prompt group side by side (/runs/<id>/samples/step/<s>/group/<g>/): the columns are drawn by the
// server; this script keeps the sort in the URL, draws the columns in the chosen render mode (render.js),
// and marks where the two chosen completions (A and B) first part: the text they share is dimmed, the
// first differing character marked. The server measures it (on tokens where both have token data), both
// for the first pair (best and worst reward) and for each pair picked with the A / B buttons.
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const meta = JSON.parse($("group-data").textContent);
  const columns = new Map([...document.querySelectorAll(".column")].map((col) => {
    const pre = col.querySelector("pre.response");
    return [Number(col.dataset.index), { col, pre, rendered: col.querySelector(".response-rendered"), text: pre.textContent }];
  }));
  let pair = meta.pair; // {a, b, level, index, identical, char_a, char_b} or null
  let opts = { mode: "raw" };
  let seq = 0;

  function mark(c, offset, width) {
    const text = c.text;
    const nodes = [];
    const span = (cls, s) => Object.assign(document.createElement("span"), { className: cls, textContent: s });
    if (offset > 0) nodes.push(span("same", text.slice(0, offset)));
    const m = document.createElement("mark");
    m.className = "diverge";
    m.textContent = text.slice(offset, offset + width);
    m.title = offset < text.length ? "first difference" : "this completion ends here: the other one goes on";
    if (offset >= text.length) m.classList.add("end");
    nodes.push(m);
    if (offset + width < text.length) nodes.push(span("after", text.slice(offset + width)));
    c.pre.replaceChildren(...nodes);
    c.pre.scrollTop = Math.max(0, m.offsetTop - c.pre.offsetTop - 60);
  }
  function draw() {
    const raw = opts.mode === "raw";
    for (const [index, c] of columns) {
      c.col.classList.toggle("chosen-a", !!pair && pair.a === index);
      c.col.classList.toggle("chosen-b", !!pair && pair.b === index);
      c.pre.hidden = !raw;
      c.rendered.hidden = raw;
      if (!raw) { window.dapoRender.into(c.rendered, c.text, opts); continue; }
      c.rendered.replaceChildren();
      if (pair && !pair.identical && (pair.a === index || pair.b === index)) mark(c, ...(pair.a === index ? [pair.char_a, pair.span_a] : [pair.char_b, pair.span_b]));
      else c.pre.textContent = c.text;
    }
    for (const b of document.querySelectorAll(".pick-a")) b.classList.toggle("active", !!pair && Number(b.dataset.index) === pair.a);
    for (const b of document.querySelectorAll(".pick-b")) b.classList.toggle("active", !!pair && Number(b.dataset.index) === pair.b);
    const info = $("divergence");
    if (!pair) return;
    const unit = pair.level === "token" ? "token" : "character";
    info.textContent = pair.identical ? `A #${pair.a} and B #${pair.b} are identical.`
      : `A #${pair.a} and B #${pair.b} part at ${unit} ${pair.index}` +
        (pair.level === "token" ? ` (character ${pair.char_a} of A, ${pair.char_b} of B)` : " (no token data on both: compared as text)") +
        (raw ? "" : ": the mark shows in Raw.");
    info.dataset.level = pair.level;
    info.dataset.index = pair.index;
  }
  async function choose(a, b) {
    const mine = ++seq;
    const q = new URLSearchParams({ split: meta.split, a, b });
    const resp = await fetch(`${meta.urls.diverge}?${q}`, { headers: { Accept: "application/json" } });
    const body = await resp.json();
    if (mine !== seq) return;
    if (!resp.ok) { $("divergence").textContent = body.error || `The server answered ${resp.status}.`; return; }
    pair = body;
    const url = new URL(location.href);
    url.searchParams.set("a", a); url.searchParams.set("b", b);
    history.replaceState(null, "", url);
    draw();
  }
  $("columns").addEventListener("click", (e) => {
    const button = e.target.closest(".pick-a, .pick-b");
    if (!button) return;
    const index = Number(button.dataset.index);
    const isA = button.classList.contains("pick-a");
    let a = pair ? pair.a : meta.indexes[0], b = pair ? pair.b : meta.indexes[1];
    if (isA) { if (index === b) b = a; a = index; } else { if (index === a) a = b; b = index; } // same one: swap
    if (a !== undefined && b !== undefined) choose(a, b);
  });
  $("column-sort").addEventListener("change", () => {
    const url = new URL(location.href);
    url.searchParams.set("sort", $("column-sort").value);
    location.href = url.toString(); // the server orders the columns; the pair stays in ?a=&b=
  });
  opts = window.dapoRender.menu($("render-menu"), $("render-menu").dataset.user || "", (o) => { opts = o; draw(); });
  draw();
  if (pair) history.replaceState(null, "", (() => { const u = new URL(location.href); u.searchParams.set("a", pair.a); u.searchParams.set("b", pair.b); return u; })());
  document.body.dataset.columns = "ready"; // tests wait for it
})();
