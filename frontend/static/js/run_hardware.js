// Hardware charts: CPU, memory and (where pynvml found a GPU) GPU use of each process of the run (the
// controller, each Ray learner and rollout worker), sampled every logging.hardware_interval_s seconds
// (dapo.loop.hardware). One line per worker, wall-clock time on x. Data: the page's json_script, then
// run_detail.js's websocket events ("dapo:event": "hardware" events, and the samples of each snapshot).
(() => {
  "use strict";

  const initial = JSON.parse(document.getElementById("run-data").textContent);
  const grid = document.getElementById("hardware-charts");
  if (!grid || !window.Plotly) return;
  const CHARTS = [
    { key: "cpu_percent", title: "CPU (% of one core)", digits: ".0f" },
    { key: "rss_gb", title: "Memory RSS (GB)", digits: ".2f" },
    { key: "sys_mem_used_gb", title: "System memory used (GB)", digits: ".2f", total: "sys_mem_total_gb" },
    { key: "gpu_util", title: "GPU utilisation (%)", digits: ".0f", gpu: true },
    { key: "gpu_mem_used_gb", title: "GPU memory used (GB)", digits: ".2f", gpu: true, total: "gpu_mem_total_gb" },
  ];
  const byWorker = new Map(); // worker -> [{time, values}] in time order
  const seen = new Set(); // "worker@time": a sample that came twice (snapshot and live) is drawn once
  const els = new Map();
  let pending = false;

  function add(samples) {
    for (const s of samples || []) {
      const id = `${s.worker}@${s.time}`;
      if (seen.has(id)) continue;
      seen.add(id);
      if (!byWorker.has(s.worker)) byWorker.set(s.worker, []);
      const list = byWorker.get(s.worker);
      let j = list.length;
      while (j > 0 && list[j - 1].time > s.time) j--;
      list.splice(j, 0, s);
    }
    if (!pending) { pending = true; requestAnimationFrame(draw); }
  }

  function workers() { // controller first, then learners and rollout workers by rank
    return [...byWorker.keys()].sort((a, b) => (a === "controller" ? -1 : b === "controller" ? 1 : a.localeCompare(b, undefined, { numeric: true })));
  }

  function draw() {
    pending = false;
    const names = workers();
    const hasGpu = names.some((w) => byWorker.get(w).some((s) => s.values.gpu_util !== undefined));
    $note().hidden = hasGpu || !names.length;
    for (const spec of CHARTS) {
      if (spec.gpu && !hasGpu) continue;
      let el = els.get(spec.key);
      if (!el) {
        el = document.createElement("div");
        el.className = "chart hardware-chart";
        el.dataset.quantity = spec.key;
        grid.appendChild(el);
        els.set(spec.key, el);
      }
      const traces = names.map((w, i) => {
        const pts = byWorker.get(w).filter((s) => s.values[spec.key] !== undefined);
        return { type: "scatter", mode: pts.length < 30 ? "lines+markers" : "lines", name: w,
          x: pts.map((s) => new Date(s.time * 1000)), y: pts.map((s) => s.values[spec.key]),
          line: { width: 1.5, color: window.dapoCharts.color(i) }, marker: { size: 4 },
          hovertemplate: `${window.dapoPlotText(w)}<br>%{x|%H:%M:%S}: %{y:${spec.digits}}<extra></extra>` };
      }).filter((t) => t.x.length);
      const layout = window.dapoCharts.layout({ // charts.js: the theme's colours
        margin: { l: 44, r: 10, t: 28, b: 30 }, height: 230, showlegend: traces.length > 1,
        legend: { orientation: "h", y: -0.25, font: { size: 10 } },
        title: { text: spec.title, font: { size: 12 }, x: 0.02 },
        xaxis: { type: "date" }, yaxis: { rangemode: "tozero" },
      });
      if (spec.total) { // the machine's (or the GPUs') total as the top of the axis
        const totals = names.flatMap((w) => byWorker.get(w).map((s) => s.values[spec.total])).filter((v) => v !== undefined);
        if (totals.length) layout.yaxis.range = [0, Math.max(...totals) * 1.02];
      }
      if (!traces.length) {
        const live = ["queued", "running"].includes(initial.run.status);
        layout.xaxis = { visible: false }; layout.yaxis = { visible: false };
        layout.annotations = [{ text: live ? "waiting for the first sample" : "no hardware sample recorded",
          showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.45, font: { size: 12, color: window.dapoCharts.muted() } }];
      }
      const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"],
        toImageButtonOptions: { format: "png", filename: `run-${initial.run.id}-hardware-${spec.key}`, scale: 2 } };
      Plotly.react(el, traces, layout, config);
      el.dataset.points = String(traces.reduce((n, t) => n + t.x.length, 0));
    }
  }
  function $note() { return document.getElementById("hardware-no-gpu"); }

  add(initial.hardware);
  if (!initial.hardware || !initial.hardware.length) draw();
  document.addEventListener("dapo:event", (e) => {
    const ev = e.detail;
    if (ev.type === "hardware" || ((ev.type === "snapshot") && ev.hardware)) add(ev.type === "hardware" ? ev.samples : ev.hardware);
  });
})();
