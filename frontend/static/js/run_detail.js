// The live page of a run: health panel, charts of every metric by namespace, newest samples.
// Data arrives embedded (json_script), then over /ws/runs/<id>/: a snapshot of what the page lacks,
// live step events after. On a dropped connection it reconnects with ?after=<last step> and catches up.
// Model output is only ever set with textContent: it is never parsed as HTML.
(() => {
  "use strict";

  const initial = JSON.parse(document.getElementById("run-data").textContent);
  const config = JSON.parse(document.getElementById("run-config").textContent);
  const runId = initial.run.id;
  const $ = (id) => document.getElementById(id);

  const series = new Map(); // metric name -> {steps: [], values: []}
  const bindings = new Map(); // metric name -> [{chart, t}] (t: the chart's trace spec bound to it)
  const charts = []; // {el, spec, plotted, traces: [{label, match, name}]}
  let lastStep = -1;
  let run = initial.run;
  let runReceivedAt = Date.now();

  const VAL_ACC = (n) => /^val\/acc\/mean@/.test(n);
  const HEALTH = [
    { title: "Reward", traces: [["critic/score/mean", "train reward"]] },
    { title: "Accuracy", traces: [["train/acc/mean", "train acc"], [VAL_ACC, "val acc (mean@k)"]] },
    { title: "Entropy", traces: [["actor/entropy", "old policy (verl)"], ["actor/entropy_update", "during the update"]] },
    { title: "Response length", traces: [["response_length/mean", "mean length"]] },
    { title: "Clip ratio (truncated)", traces: [["response_length/clip_ratio", "clip ratio"]] },
    { title: "PG clip fractions", traces: [["actor/pg_clipfrac", "high (1+ε_high)"], ["actor/pg_clipfrac_lower", "low (dual clip)"]] },
    { title: "Prompts per step", traces: [["train/num_prompts_kept", "kept (trained)"], ["train/num_prompts_surplus", "surplus"], ["train/num_prompts_generated", "generated"]] },
    { title: "Groups all-correct / all-wrong", traces: [["train/frac_all_correct", "all correct"], ["train/frac_all_wrong", "all wrong"]] },
  ];
  const TILES = [
    ["Train acc", "train/acc/mean", 3], ["Reward", "critic/score/mean", 3], ["Val acc", VAL_ACC, 3],
    ["Entropy", "actor/entropy", 3], ["Resp. length", "response_length/mean", 1],
    ["Clip ratio", "response_length/clip_ratio", 3], ["pg_clipfrac", "actor/pg_clipfrac", 4],
    ["pg_clipfrac_lower", "actor/pg_clipfrac_lower", 4], ["Kept / generated", null, 0],
    ["All-correct / all-wrong", null, 0],
  ];
  const NS_ORDER = ["actor", "critic", "response_length", "prompt_length", "timing_s", "perf", "train", "val"];
  const { fixed: fmt, pct, duration } = window.dapoCharts;

  // ---- series ----------------------------------------------------------------------------------

  function lastOf(name) {
    const s = series.get(name);
    return s && s.steps.length ? s.steps[s.steps.length - 1] : -Infinity;
  }
  function latest(match) {
    if (typeof match === "string") {
      const s = series.get(match);
      return s && s.values.length ? s.values[s.values.length - 1] : null;
    }
    for (const name of series.keys()) if (match(name)) return latest(name);
    return null;
  }
  // Append points newer than what we have; returns {name: {steps, values}} of what was appended.
  function merge(metrics) {
    const added = {};
    for (const [name, pts] of Object.entries(metrics)) {
      if (!series.has(name)) series.set(name, { steps: [], values: [] });
      const s = series.get(name);
      const from = lastOf(name);
      const steps = [], values = [];
      pts.steps.forEach((step, i) => { if (step > from) { steps.push(step); values.push(pts.values[i]); } });
      if (!steps.length) continue;
      s.steps.push(...steps); s.values.push(...values);
      added[name] = { steps, values };
      lastStep = Math.max(lastStep, steps[steps.length - 1]);
    }
    return added;
  }

  // ---- charts ----------------------------------------------------------------------------------

  const LAYOUT = window.dapoCharts.layout({
    margin: { l: 44, r: 10, t: 28, b: 30 },
    height: 210,
    showlegend: false,
    xaxis: { title: { text: "" } },
    yaxis: { tickformat: ".3~g" },
  });
  const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function addChart(container, title, traceSpecs) {
    const el = document.createElement("div");
    el.className = "chart";
    el.dataset.title = title;
    container.appendChild(el);
    const chart = { el, title, plotted: false, bound: [], traces: traceSpecs.map(([match, label]) => ({ match, label, name: null })) };
    charts.push(chart);
    observer.observe(el);
    return chart;
  }
  function bindTrace(chart, t, name) {
    t.name = name;
    if (!bindings.has(name)) bindings.set(name, []);
    bindings.get(name).push({ chart, t });
    chart.bound.push(t);
    chart.bound.sort((a, b) => chart.traces.indexOf(a) - chart.traces.indexOf(b)); // Plotly's order: the spec's
  }
  function resolveTraces(chart) {
    const fresh = [];
    for (const t of chart.traces) {
      if (t.name) continue;
      const name = typeof t.match === "string" ? (series.has(t.match) ? t.match : null)
        : [...series.keys()].find(t.match);
      if (name) { bindTrace(chart, t, name); fresh.push(t); }
    }
    return fresh;
  }
  function traceOf(t, chart) {
    const i = chart.traces.indexOf(t); // colour by the chart's spec, whatever metric arrived first
    const s = series.get(t.name);
    return { x: s.steps.slice(), y: s.values.slice(), name: t.label, type: "scatter",
      mode: lastStep < 40 ? "lines+markers" : "lines", marker: { size: 4 }, // a lone point must show
      line: { width: 1.6, color: window.dapoCharts.color(i) },
      hovertemplate: `${t.label}<br>step %{x}: %{y:.4g}<br><i>click: this step's samples</i><extra></extra>` };
  }
  // A click on a point opens the inspector at that step: validation samples for a val/ or val-*/ metric,
  // train samples otherwise; near=1 lands on the nearest step with samples when that step has none.
  function openSamplesAt(chart, ev) {
    const point = ev.points && ev.points[0];
    const t = point && chart.bound[point.curveNumber];
    if (!t) return;
    const split = /^val[/-]/.test(t.name) ? "val" : "train";
    const q = new URLSearchParams({ split, step: Math.round(point.x), near: 1 });
    location.href = `${$("samples-link").getAttribute("href")}?${q}`;
  }
  function plot(chart) {
    resolveTraces(chart);
    const bound = chart.bound;
    const layout = { ...LAYOUT, title: { text: chart.title, font: { size: 12 }, x: 0.02 }, showlegend: bound.length > 1,
      legend: { orientation: "h", y: -0.25, font: { size: 10 } } };
    if (bound.length > 1) layout.height = 230;
    chart.dtick = stepTick();
    layout.xaxis = { ...LAYOUT.xaxis, dtick: chart.dtick };
    // where the curve changed hands: the step a fork starts after, each resume from a checkpoint
    const markers = (run.markers || []);
    if (bound.length && markers.length) {
      const colour = (m) => (m.kind === "fork" ? "#7c3aed" : "#d97706");
      layout.shapes = markers.map((m) => ({ type: "line", xref: "x", yref: "paper", x0: m.step, x1: m.step, y0: 0, y1: 1,
        line: { dash: "dot", width: 1.5, color: colour(m) } }));
      layout.annotations = markers.map((m) => ({ x: m.step, xref: "x", y: 1, yref: "paper", yanchor: "bottom",
        text: m.kind === "fork" ? "fork" : "resume", hovertext: m.label, showarrow: false,
        font: { size: 10, color: colour(m) } }));
    }
    if (!bound.length) { // no point yet: say so instead of drawing empty axes from -1 to 6
      const live = ["queued", "running"].includes(run.status);
      const text = !live ? "no data: the run recorded no step of this metric"
        : lastStep < 0 ? "waiting for the first step" : "no value of this metric yet";
      layout.xaxis = { visible: false }; layout.yaxis = { visible: false };
      layout.annotations = [{ text, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.45,
        font: { size: 12, color: window.dapoCharts.muted() } }];
    }
    const filename = `run-${runId}-${chart.title}`.replace(/[^A-Za-z0-9_.@-]+/g, "_"); // the camera button's PNG
    const config = { ...PLOT_CONFIG, toImageButtonOptions: { format: "png", filename, scale: 2 } };
    Plotly.react(chart.el, bound.map((t) => traceOf(t, chart)), layout, config);
    if (!chart.plotted) chart.el.on("plotly_click", (ev) => openSamplesAt(chart, ev));
    chart.plotted = true;
    chart.stale = false;
  }
  // Draw charts only when they are near the viewport: 40+ charts at once would stall the page. A chart
  // out of view is only marked stale and redrawn whole when it comes back into view.
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      const chart = charts.find((c) => c.el === e.target);
      if (!chart) continue;
      chart.visible = e.isIntersecting;
      if (chart.visible && (!chart.plotted || chart.stale)) plot(chart);
    }
    markReady();
  }, { rootMargin: "300px" });

  // Live points wait in `queued` (chart -> trace index -> points) and are drawn chart by chart within a
  // small time budget per frame, so the page keeps receiving events while it draws.
  const queued = new Map();
  function extendCharts(added) {
    for (const [name, pts] of Object.entries(added)) {
      for (const { chart, t } of bindings.get(name) || []) {
        if (!chart.plotted) continue;
        const trace = chart.bound.indexOf(t);
        if (!chart.visible) { chart.stale = true; continue; }
        if (!queued.has(chart)) queued.set(chart, new Map());
        const q = queued.get(chart);
        if (!q.has(trace)) q.set(trace, { x: [], y: [] });
        q.get(trace).x.push(...pts.steps); q.get(trace).y.push(...pts.values);
      }
    }
    // Metrics seen for the first time: new traces on plotted charts, new charts in their namespace.
    for (const chart of charts) {
      if (chart.plotted && resolveTraces(chart).length) { chart.stale = true; queued.set(chart, new Map()); }
    }
    for (const name of Object.keys(added)) if (!namespaceCharts.has(name)) addMetricChart(name);
    flushCharts();
  }
  function flushCharts() {
    const started = performance.now();
    for (const [chart, q] of queued) {
      queued.delete(chart);
      if (chart.stale || chart.dtick !== stepTick()) plot(chart);
      else if (q.size) Plotly.extendTraces(chart.el, { x: [...q.values()].map((u) => u.x), y: [...q.values()].map((u) => u.y) }, [...q.keys()]);
      if (performance.now() - started > 12 && queued.size) { requestAnimationFrame(flushCharts); return; }
    }
  }

  function stepTick() { return lastStep <= 12 ? 1 : null; }

  const namespaceCharts = new Set();
  function namespaceOf(name) { return name.includes("/") ? name.split("/")[0] : "other"; }
  function namespaceGrid(ns) {
    let grid = document.getElementById(`ns-${ns}`);
    if (grid) return grid;
    const box = document.createElement("details");
    box.className = "card namespace";
    box.open = true;
    const summary = document.createElement("summary");
    summary.textContent = `${ns}/`;
    grid = document.createElement("div");
    grid.className = "chart-grid";
    grid.id = `ns-${ns}`;
    box.append(summary, grid);
    const all = [...$("namespaces").children];
    const rank = (n) => { const i = NS_ORDER.indexOf(n); return i < 0 ? NS_ORDER.length : i; };
    const before = all.find((b) => rank(b.dataset.ns) > rank(ns));
    box.dataset.ns = ns;
    $("namespaces").insertBefore(box, before || null);
    return grid;
  }
  function addMetricChart(name) {
    namespaceCharts.add(name);
    addChart(namespaceGrid(namespaceOf(name)), name, [[name, name]]);
  }

  // ---- status, tiles, samples -----------------------------------------------------------------

  let shownStatus = `${initial.run.status}/${initial.run.cancel_requested}`;
  function renderRun(state) {
    run = state; runReceivedAt = Date.now();
    const now = `${state.status}/${state.cancel_requested}`;
    if (now !== shownStatus) { // "Cancelling: ..." is stale once the run is cancelled: drop such notes
      // Only the page's notes: the health panel's warning list is a ".messages" list too, and must stay.
      document.querySelectorAll(".messages .status-note").forEach((el) => el.remove());
      document.querySelectorAll(".messages:not(#health-warnings)").forEach((ul) => { if (!ul.children.length) ul.remove(); });
      shownStatus = now;
    }
    const badge = $("run-status");
    badge.textContent = statusWord(state);
    titleAndNotify(state);
    badge.dataset.status = state.status;
    const pct = Math.round(100 * (state.progress || 0));
    $("progress-bar").style.width = `${pct}%`;
    $("progress-text").textContent = `step ${state.step} / ${state.total_steps || "?"} (${pct}%)`;
    const trainer = { trl: "TRL", verl: "verl" }[state.source];  // an external run: its trainer keeps no checkpoint here
    $("checkpoint").textContent = trainer ? `not recorded by ${trainer}` : state.last_checkpoint_step === null ? "–" : `step ${state.last_checkpoint_step}`;
    if ($("cancel-form")) $("cancel-form").hidden = !state.can_cancel; // owner only: a shared reader has none
    if ($("resume-form")) $("resume-form").hidden = !state.can_resume;
    // a reader's page has no Fork button: a shared run's checkpoints are its owner's
    if (state.last_checkpoint_step !== null && $("fork-btn")) $("fork-btn").hidden = false;
    $("run-error").hidden = !state.error;
    $("run-error").textContent = state.error || "";
    renderQueue(state);
    tick();
  }
  // Where a queued run waits and why (runs.scheduling): each scheduler pass that moves it sends "queue";
  // other status events leave the last one shown while the run is still queued.
  let queueShown = initial.run.queue || null;
  function renderQueue(state) {
    const preempt = $("preempt-form");  // staff only
    if (preempt) preempt.hidden = state.status !== "running" || state.preempt_requested || state.cancel_requested;
    const box = $("run-queue");
    if (!box) return;
    if ("queue" in state) queueShown = state.queue;
    if (state.status !== "queued" || !queueShown) { box.hidden = true; return; }
    const q = queueShown;
    const yours = box.dataset.yours === "1";
    const reason = !yours && state.queue_shared ? state.queue_shared : q.reason;
    box.textContent = q.position ? `In the queue, position ${q.position}: ${reason}.` : `Queued: ${reason}.`;
    box.hidden = false;
  }
  // The tab title says how the run stands (a background tab shows it), and a run that succeeds, fails or
  // stalls while the page is open raises a desktop notification once the user allowed them.
  const MARKS = { queued: "…", running: "▶", succeeded: "✓", failed: "✗", cancelled: "■" };
  function statusWord(state) {
    if (state.status === "running" && state.cancel_requested) return "cancelling";
    if (state.status === "running" && state.preempt_requested) return "pre-empting";
    return state.status === "running" && state.stalled ? "stalled" : state.status;
  }
  let announced = statusWord(initial.run);
  function titleAndNotify(state) {
    const word = statusWord(state);
    const at = state.status === "running" ? ` ${state.step}/${state.total_steps || "?"}` : "";
    document.title = `${word === "stalled" ? "⚠" : MARKS[state.status] || ""} ${word}${at} · #${state.id} ${state.name}`;
    if (word !== announced && ["succeeded", "failed", "stalled"].includes(word) && "Notification" in window
        && Notification.permission === "granted") {
      const detail = word === "failed" && state.error ? `: ${state.error.split("\n").pop().slice(0, 200)}` : "";
      new Notification(`Run #${state.id} ${word}`, {
        body: `${state.name}, step ${state.step}/${state.total_steps || "?"}${detail}`, tag: `dapo-run-${state.id}` });
    }
    announced = word;
  }
  function desktopButton() {
    const btn = $("desktop-notify");
    if (!("Notification" in window)) return;
    btn.hidden = false;
    const p = Notification.permission;
    btn.disabled = p !== "default";
    btn.textContent = p === "granted" ? "Desktop notifications on" : p === "denied" ? "Desktop notifications blocked" : "Desktop notifications";
  }
  $("desktop-notify").addEventListener("click", () => { Notification.requestPermission().then(desktopButton); });
  desktopButton();

  function tick() {
    const live = run.status === "running" ? (Date.now() - runReceivedAt) / 1000 : 0;
    $("elapsed").textContent = duration(run.elapsed_s === null ? null : run.elapsed_s + live);
    $("running").textContent = duration(run.running_s === null || run.running_s === undefined ? null : run.running_s + live);
    const est = window.dapoHealth.eta(run, live);
    $("eta").textContent = est.eta === null ? "–" : duration(est.eta) + (est.slow ? " (this step is slow)" : "");
  }
  // "trained / generated", and the surplus apart: groups that passed the filter but were not trained on
  function keptText(latest) {
    const surplus = latest("train/num_prompts_surplus");
    const text = `${fmt(latest("train/num_prompts_kept"), 0)} / ${fmt(latest("train/num_prompts_generated"), 0)}`;
    return surplus ? `${text} (+${fmt(surplus, 0)} surplus)` : text;
  }
  function renderTiles() {
    const tiles = $("tiles");
    tiles.replaceChildren();
    const notes = window.dapoHealth.warnings((name) => series.get(name));
    $("health-warnings").replaceChildren(...notes.map((text) => {
      const li = document.createElement("li"); li.className = "msg msg-warn"; li.textContent = text; return li;
    }));
    for (const [label, match, digits] of TILES) {
      let value;
      if (label.startsWith("Kept")) value = keptText(latest);
      else if (label.startsWith("All-")) value = `${pct(latest("train/frac_all_correct"))} / ${pct(latest("train/frac_all_wrong"))}`;
      else value = fmt(latest(match), digits);
      const tile = document.createElement("div");
      tile.className = "tile";
      tile.title = window.dapoHealth.TIPS[label] || "";
      const v = document.createElement("div"); v.className = "tile-value"; v.textContent = value;
      const l = document.createElement("div"); l.className = "tile-label"; l.textContent = label;
      tile.append(v, l);
      tiles.appendChild(tile);
    }
  }
  let shownSamples = [];
  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }
  function renderSamples(samples) {
    if (!samples || !samples.length) return;
    shownSamples = samples;
    const body = $("samples-body");
    body.replaceChildren();
    samples.forEach((s, i) => {
      const tr = document.createElement("tr");
      tr.className = "clickable";
      tr.dataset.index = i;
      tr.tabIndex = 0; // Enter or Space opens it, like a click
      tr.setAttribute("aria-label", `Sample ${s.sample_index}: open in full`);
      tr.append(cell(s.sample_index), cell(s.group), cell(fmt(s.reward, 2), "num"), cell(s.acc === null ? "–" : s.acc ? "✓" : "✗", s.acc === null ? "" : s.acc ? "ok" : "bad"),
        cell(s.pred), cell(s.ground_truth), cell(s.length === null ? "–" : s.length, "num"), cell(s.truncated ? "yes" : ""), cell(s.kept ? "kept" : "filtered"),
        cell(fmt(s.advantage, 2), "num"), cell(s.response.slice(0, 90), "response"));
      body.appendChild(tr);
    });
    $("samples-step").textContent = `step ${samples[0].step} · ${samples[0].split}`;
    $("samples-empty").hidden = true;
  }
  function openSample(s) {
    $("sd-title").textContent = `Step ${s.step} · ${s.split} sample ${s.sample_index} (group ${s.group})`;
    const facts = $("sd-facts");
    facts.replaceChildren();
    const rows = [["Prediction", s.pred], ["Ground truth", s.ground_truth], ["Correct", s.acc === null ? "not recorded" : s.acc ? "yes" : "no"],
      ["Score", fmt(s.score, 2)], ["Overlong penalty", fmt(s.overlong_penalty, 3)], ["Reward", fmt(s.reward, 3)],
      ["Advantage", fmt(s.advantage, 3)], ["Length", s.length === null ? "not recorded" : s.length], ["Truncated", s.truncated ? "yes" : "no"],
      ["Dynamic sampling", s.kept ? "kept" : "filtered"]];
    for (const [k, v] of rows) {
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = String(v);
      facts.append(dt, dd);
    }
    $("sd-prompt").textContent = s.prompt;
    $("sd-response").textContent = s.response;
    $("sample-dialog").showModal();
    if (s.text_cut) loadFullSample(s); // live events carry cut texts; the API has them whole
  }
  async function loadFullSample(s) {
    const q = new URLSearchParams({ step: s.step, split: s.split, index: s.sample_index });
    try {
      const resp = await fetch(`/api/runs/${runId}/samples/?${q}`, { headers: { Accept: "application/json" } });
      const full = (await resp.json()).results[0];
      if (full) { $("sd-prompt").textContent = full.prompt; $("sd-response").textContent = full.response; }
    } catch (err) { /* the cut text stays */ }
  }
  $("samples-body").addEventListener("click", (e) => {
    const tr = e.target.closest("tr");
    if (tr) openSample(shownSamples[Number(tr.dataset.index)]);
  });
  $("samples-body").addEventListener("keydown", (e) => {
    const tr = e.target.closest("tr");
    if (!tr || (e.key !== "Enter" && e.key !== " ")) return;
    e.preventDefault();
    openSample(shownSamples[Number(tr.dataset.index)]);
  });

  // ---- websocket (live.js: reconnects with backoff and jitter, asks for ?after=<last step>) -------------

  let socket = null;
  function onEvent(ev, raw) {
    // the page's other panels (distributions, hardware, title, notifications) follow the same events
    document.dispatchEvent(new CustomEvent("dapo:event", { detail: ev }));
    if (ev.type === "step") {
      const arrived = performance.timeOrigin + performance.now();
      window.dapoLive.record("__dapoReceived", ev.step, arrived); // bench/ws_latency.py (opt-in)
      window.dapoLive.record("__dapoRelayMs", ev.step, arrived - ev.sent_at * 1000); // publish -> here
      if (ev.step <= lastStep) return renderRun(ev.run); // a replay of a step we have
      if (lastStep >= 0 && ev.step > lastStep + 1) { // we missed steps: ask the server for them
        socket.send({ type: "catchup", after_step: lastStep });
        return renderRun(ev.run);
      }
      const metrics = {};
      for (const [n, v] of Object.entries(ev.metrics)) metrics[n] = { steps: [ev.step], values: [v] };
      apply(metrics, ev.samples);
      lastStep = Math.max(lastStep, ev.step);
      renderRun(ev.run);
    } else if (ev.type === "snapshot" || ev.type === "catchup") {
      apply(ev.metrics, ev.samples);
      renderRun(ev.run);
    } else if (ev.type === "status") {
      renderRun(ev.run);
    } else if (ev.type === "deleted") { // its owner deleted it: nothing here is real any more
      $("run-error").hidden = false;
      $("run-error").textContent = "This run was deleted.";
      // no reconnect can succeed: the server answers 4004 (no such run), which live.js takes as final
      if (raw) raw.close();
    }
  }
  // Data is merged at once; drawing waits for the next animation frame, so a burst of events (a
  // catch-up, a fast run) costs one redraw, and a hidden tab draws nothing until it is shown again.
  let pendingAdded = {}, pendingSamples = null, frameRequested = false;
  function apply(metrics, samples) {
    for (const [name, pts] of Object.entries(merge(metrics))) {
      const p = pendingAdded[name] || (pendingAdded[name] = { steps: [], values: [] });
      p.steps.push(...pts.steps); p.values.push(...pts.values);
    }
    if (samples && samples.length) pendingSamples = samples;
    if (!frameRequested) { frameRequested = true; requestAnimationFrame(draw); }
  }
  function draw() {
    frameRequested = false;
    const added = pendingAdded, samples = pendingSamples;
    pendingAdded = {}; pendingSamples = null;
    extendCharts(added);
    renderTiles();
    if (samples) renderSamples(samples);
  }

  // ---- start -----------------------------------------------------------------------------------

  let ready = false;
  function markReady() {
    if (ready) return;
    ready = true;
    performance.mark("dapo-charts-ready");
    window.dapoLive.mark("__dapoReady", performance.now()); // bench/page_load.py (opt-in)
  }
  $("config-text").textContent = JSON.stringify(config, null, 2);
  merge(initial.metrics);
  const healthGrid = $("health-charts");
  for (const spec of HEALTH) addChart(healthGrid, spec.title, spec.traces);
  const names = [...series.keys()].sort();
  for (const name of names) addMetricChart(name);
  renderRun(initial.run);
  renderTiles();
  renderSamples(initial.samples);
  setInterval(tick, 1000);
  socket = window.dapoLive.connect({ runId, after: () => lastStep, onEvent, indicator: $("live-indicator") });
})();
