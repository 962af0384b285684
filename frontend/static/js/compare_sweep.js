// The comparison's configs against a metric: a parallel-coordinates chart (plotly parcoords) with one axis
// per config setting that differs between the runs and a last axis for the chosen metric's last, highest
// or lowest value, and a table of the same, sortable by any column. Data: /runs/compare/sweep/ (one request
// per metric or refresh). Names only ever reach the page as textContent, and plotly through dapoPlotText.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const section = $("sweep");
  if (!section) return;
  const data = JSON.parse($("compare-data").textContent);
  const escape = window.dapoPlotText;
  const WORDS = { last: "last", max: "highest", min: "lowest" };
  const ACTIVE = ["queued", "running"], LIVE_MS = 10000;
  const state = { metric: data.chosen[0] || data.names[0] || "", value: "last", sortKey: "metric", desc: true };
  let body = null;

  // ---- values and axes -----------------------------------------------------------------------------

  const fmt = (v) => (v === null || v === undefined ? "—" : typeof v === "number" ? (Number.isInteger(v) ? String(v) : Number(v.toPrecision(4)).toString()) : String(v));
  const shown = (v) => (v === null ? "none" : typeof v === "boolean" ? String(v) : fmt(v));
  const isNumber = (v) => typeof v === "number" && Number.isFinite(v);
  function metricOf(run) { const v = run[state.value]; return isNumber(v) ? v : null; }

  // A setting's axis: numbers on a linear scale, or log10 when they are positive and span 20x or more
  // (learning rates); anything else (text, true/false, none) as categories in sorted order.
  function axis(field, values) {
    const label = escape(field.name);
    if (values.every(isNumber)) {
      const distinct = [...new Set(values)].sort((a, b) => a - b);
      const log = distinct[0] > 0 && distinct[distinct.length - 1] / distinct[0] >= 20;
      const f = log ? Math.log10 : (v) => v;
      const ticks = distinct.length <= 10 ? distinct : null;
      return { label: log ? `${label} (log)` : label, values: values.map(f),
        ...(ticks ? { tickvals: ticks.map(f), ticktext: ticks.map((v) => escape(fmt(v))) } : {}) };
    }
    const cats = [...new Set(values.map(shown))].sort();
    return { label, values: values.map((v) => cats.indexOf(shown(v))), tickvals: cats.map((_, i) => i),
      ticktext: cats.map(escape), range: [-0.25, Math.max(cats.length - 0.75, 0.25)] };
  }

  function draw() {
    const chart = $("sweep-chart"), empty = $("sweep-empty"), missing = $("sweep-missing");
    const index = body.runs.map((r, i) => i).filter((i) => metricOf(body.runs[i]) !== null);
    const absent = body.runs.length - index.length;
    missing.hidden = !absent || !index.length;
    missing.textContent = `${absent} run${absent === 1 ? " has" : "s have"} no value of ${state.metric} yet: in the table only.`;
    let why = "";
    if (!body.fields.length) why = "The runs’ configs are identical: there is no setting to set against the metric.";
    else if (!index.length) why = `No run has logged ${state.metric} yet (the chart fills in as they do).`;
    empty.hidden = !why; empty.textContent = why;
    if (why) { chart.hidden = true; if (window.Plotly) Plotly.purge(chart); return; }
    chart.hidden = false;
    const metric = index.map((i) => metricOf(body.runs[i]));
    const dims = body.fields.map((f) => axis(f, index.map((i) => f.values[i])));
    dims.push({ label: escape(`${state.metric} (${WORDS[state.value]})`), values: metric });
    const trace = { type: "parcoords", dimensions: dims,
      line: { color: metric, colorscale: "Viridis", reversescale: state.value === "min", showscale: true,
        colorbar: { thickness: 12, len: 0.8 } },
      labelangle: dims.length > 6 ? -20 : 0, labelside: "top" };
    const layout = window.dapoCharts.layout({ height: 380, margin: { l: 70, r: 70, t: dims.length > 6 ? 90 : 60, b: 24 } });
    const config = { displaylogo: false, responsive: true,
      toImageButtonOptions: { format: "png", filename: `sweep-${state.metric}`.replace(/[^A-Za-z0-9_.@-]+/g, "_"), scale: 2 } };
    Plotly.react(chart, [trace], layout, config);
  }

  // ---- the table ---------------------------------------------------------------------------------------

  function columns() {
    return [{ key: "run", label: "Run" }, { key: "status", label: "Status" },
      ...body.fields.map((f, i) => ({ key: `f${i}`, label: f.name, field: i })),
      { key: "metric", label: `${state.metric} (${WORDS[state.value]})`, num: true }];
  }
  function cell(run, i, col) {
    if (col.key === "run") return run.id;
    if (col.key === "status") return run.status;
    if (col.key === "metric") return metricOf(run);
    return body.fields[col.field].values[i];
  }
  function compare(a, b) {
    if (a === null || a === undefined) return b === null || b === undefined ? 0 : 1; // empty cells last
    if (b === null || b === undefined) return -1;
    if (typeof a === "number" && typeof b === "number") return state.desc ? b - a : a - b;
    const s = String(a).localeCompare(String(b), undefined, { numeric: true });
    return state.desc ? -s : s;
  }
  function table() {
    const cols = columns();
    $("sweep-head").replaceChildren(...cols.map((c) => {
      const th = document.createElement("th");
      th.scope = "col";
      if (c.num) th.className = "num";
      th.setAttribute("aria-sort", c.key === state.sortKey ? (state.desc ? "descending" : "ascending") : "none");
      const b = document.createElement("button");
      b.type = "button"; b.textContent = c.label; b.dataset.key = c.key;
      th.appendChild(b);
      return th;
    }));
    const col = cols.find((c) => c.key === state.sortKey) || cols[cols.length - 1];
    const order = body.runs.map((r, i) => i).sort((x, y) => compare(cell(body.runs[x], x, col), cell(body.runs[y], y, col)) || x - y);
    $("sweep-body").replaceChildren(...order.map((i) => {
      const run = body.runs[i], tr = document.createElement("tr");
      tr.dataset.runId = run.id;
      for (const c of cols) {
        const td = document.createElement("td");
        if (c.key === "run") {
          const a = document.createElement("a");
          a.href = run.url; a.textContent = `#${run.id} ${run.name}`;
          td.appendChild(a);
        } else if (c.key === "status") {
          td.textContent = run.status === "running" ? `running ${run.step}/${run.total_steps}` : run.status;
        } else {
          const v = cell(run, i, c);
          td.textContent = c.key === "metric" ? fmt(v) : shown(v);
          if (c.num) td.className = "num";
        }
        tr.appendChild(td);
      }
      return tr;
    }));
  }
  $("sweep-head").addEventListener("click", (e) => {
    const b = e.target.closest("button");
    if (!b) return;
    if (state.sortKey === b.dataset.key) state.desc = !state.desc;
    else { state.sortKey = b.dataset.key; state.desc = b.dataset.key === "metric" ? state.value !== "min" : false; }
    table();
    $("sweep-head").querySelector(`button[data-key="${CSS.escape(state.sortKey)}"]`).focus();
  });

  // ---- data ------------------------------------------------------------------------------------------

  async function load() {
    if (!state.metric) { $("sweep-empty").hidden = false; $("sweep-empty").textContent = "These runs have logged no metric yet."; return; }
    const q = new URLSearchParams(data.query);
    q.set("metric", state.metric);
    const wanted = state.metric;
    try {
      const resp = await fetch(`${section.dataset.url}?${q}`, { headers: { Accept: "application/json" } });
      if (!resp.ok || wanted !== state.metric) return;
      body = await resp.json();
      draw(); table();
      section.dataset.ready = wanted; // read by the browser test
    } catch (err) { /* the next refresh tries again */ }
  }
  const select = $("sweep-metric");
  const names = [...new Set([...data.chosen, ...data.names])].filter((n) => n);
  select.replaceChildren(...names.map((n) => { const o = document.createElement("option"); o.value = n; o.textContent = n; o.selected = n === state.metric; return o; }));
  select.addEventListener("change", () => { state.metric = select.value; state.sortKey = "metric"; state.desc = state.value !== "min"; load(); });
  $("sweep-value").addEventListener("change", () => {
    state.value = $("sweep-value").value;
    if (state.sortKey === "metric") state.desc = state.value !== "min";
    if (body) { draw(); table(); }
  });
  setInterval(() => {
    if (!document.hidden && body && body.runs.some((r) => ACTIVE.includes(r.status))) load();
  }, LIVE_MS);
  load();
})();
