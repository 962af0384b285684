// Distributions per step (TensorBoard's histograms): one plotly heatmap per quantity, step on x, value on y,
// colour the share of the step's values in each value bin, the median as a line. The trainer records 21
// quantiles a step (0, 5, ..., 100 percent; dapo.loop.distributions); between two neighbouring quantiles lie 5%
// of the values, spread evenly, so a bin's share is the overlap of those intervals with it (a quantile pair
// that is one value is a point mass). Data: the page's json_script, then run_detail.js's websocket events
// ("dapo:event" on document).
(() => {
  "use strict";

  const initial = JSON.parse(document.getElementById("run-data").textContent);
  const grid = document.getElementById("distribution-charts");
  if (!grid || !window.Plotly) return;
  const LEVELS = initial.levels || [];
  const BINS = 40;
  const QUANTITIES = [
    ["reward", "Reward (every sample)"],
    ["length", "Response length (every sample)"],
    ["advantage", "Advantage (trained samples)"],
    ["entropy", "Token entropy (old policy, trained tokens)"],
    ["ratio", "Token ratio π_θ/π_old (first update)"],
  ];
  const data = new Map(); // name -> {steps: [], quantiles: [[...]]}
  const charts = new Map(); // name -> {el, plotted}
  let pending = false;

  function merge(distributions) {
    for (const [name, d] of Object.entries(distributions || {})) {
      if (!data.has(name)) data.set(name, { steps: [], quantiles: [] });
      const s = data.get(name);
      d.steps.forEach((step, i) => {
        const at = s.steps.indexOf(step);
        if (at >= 0) { s.quantiles[at] = d.quantiles[i]; return; } // a replayed step overwrites
        let j = s.steps.length;
        while (j > 0 && s.steps[j - 1] > step) j--;
        s.steps.splice(j, 0, step); s.quantiles.splice(j, 0, d.quantiles[i]);
      });
    }
    if (!pending) { pending = true; requestAnimationFrame(draw); }
  }

  // Share of one step's values in each of the bins [edges[b], edges[b+1]).
  function shares(q, edges) {
    const out = new Array(edges.length - 1).fill(0);
    const width = edges[1] - edges[0];
    const binOf = (v) => Math.min(out.length - 1, Math.max(0, Math.floor((v - edges[0]) / width)));
    for (let k = 0; k + 1 < q.length; k++) {
      const lo = q[k], hi = q[k + 1], mass = (LEVELS[k + 1] - LEVELS[k]) / 100;
      if (lo === null || hi === null) continue;
      if (hi <= lo) { out[binOf(lo)] += mass; continue; }
      for (let b = binOf(lo); b <= binOf(hi); b++) {
        const overlap = Math.min(hi, edges[b + 1]) - Math.max(lo, edges[b]);
        if (overlap > 0) out[b] += mass * overlap / (hi - lo);
      }
    }
    return out;
  }

  function chartFor(name, title) {
    if (charts.has(name)) return charts.get(name);
    const el = document.createElement("div");
    el.className = "chart distribution-chart";
    el.dataset.title = title;
    el.dataset.quantity = name;
    grid.appendChild(el);
    const chart = { el, title, plotted: false };
    charts.set(name, chart);
    return chart;
  }

  function plot(name, title) {
    const chart = chartFor(name, title);
    const s = data.get(name);
    const layout = window.dapoCharts.layout({ // charts.js: the theme's colours
      margin: { l: 48, r: 10, t: 28, b: 30 }, height: 230, showlegend: false,
      title: { text: title, font: { size: 12 }, x: 0.02 },
      xaxis: { title: { text: "" } }, yaxis: { tickformat: ".3~g" },
    });
    const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"],
      toImageButtonOptions: { format: "png", filename: `run-${initial.run.id}-distribution-${name}`, scale: 2 } };
    if (!s || !s.steps.length) {
      layout.xaxis = { visible: false }; layout.yaxis = { visible: false };
      const live = ["queued", "running"].includes(initial.run.status);
      layout.annotations = [{ text: live ? "waiting for the first training step" : "no distribution recorded",
        showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.45, font: { size: 12, color: window.dapoCharts.muted() } }];
      Plotly.react(chart.el, [], layout, config);
      chart.plotted = true;
      return;
    }
    const finite = s.quantiles.flat().filter((v) => v !== null);
    let lo = Math.min(...finite), hi = Math.max(...finite);
    if (hi - lo < 1e-12) { const pad = Math.max(Math.abs(lo) * 0.01, 1e-6); lo -= pad; hi += pad; }
    const edges = Array.from({ length: BINS + 1 }, (_, i) => lo + (hi - lo) * i / BINS);
    const centres = edges.slice(0, -1).map((e, i) => (e + edges[i + 1]) / 2);
    const columns = s.quantiles.map((q) => shares(q, edges)); // step -> bins
    const z = centres.map((_, b) => columns.map((c) => 100 * c[b])); // bins x steps, in percent
    const median = LEVELS.indexOf(50);
    layout.xaxis.dtick = s.steps.length <= 12 ? 1 : null;
    const traces = [
      { type: "heatmap", x: s.steps, y: centres, z, colorscale: "Blues", reversescale: true, zmin: 0,
        showscale: false, hovertemplate: "step %{x}<br>value ≈ %{y:.4g}: %{z:.1f}% of the values<extra></extra>" },
      { type: "scatter", mode: s.steps.length < 40 ? "lines+markers" : "lines", x: s.steps,
        y: s.quantiles.map((q) => q[median]), name: "median", line: { color: window.dapoCharts.color(1), width: 1.4 },
        marker: { size: 4 }, hovertemplate: "step %{x}<br>median %{y:.4g}<extra></extra>" },
    ];
    Plotly.react(chart.el, traces, layout, config);
    chart.plotted = true;
    chart.el.dataset.steps = String(s.steps.length);
  }

  function draw() {
    pending = false;
    for (const [name, title] of QUANTITIES) plot(name, title);
  }

  merge(initial.distributions);
  if (!initial.distributions || !Object.keys(initial.distributions).length) draw();
  document.addEventListener("dapo:event", (e) => {
    const ev = e.detail;
    if (ev.type === "step" && ev.distributions && Object.keys(ev.distributions).length) {
      const one = {};
      for (const [name, q] of Object.entries(ev.distributions)) one[name] = { steps: [ev.step], quantiles: [q] };
      merge(one);
    } else if ((ev.type === "snapshot" || ev.type === "catchup") && ev.distributions) {
      merge(ev.distributions);
    }
  });
})();
