// The run's key curves beside the inspector's samples (/runs/<id>/samples/): mean reward, accuracy and
// response length, train solid and validation dotted, the inspected step a dashed line. A click on a point
// opens that split's samples at that step, or at the nearest step that has samples (the server snaps and
// the note says so). The curves grow with the run's live steps. inspector.js tells of each rendered step
// ("inspector:step") and relays the websocket's metrics ("inspector:metrics").
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const dataNode = $("inspector-curves-data");
  if (!dataNode || !window.Plotly) return;
  const charts = JSON.parse(dataNode.textContent).map((c) => ({ ...c, el: null }));
  const COLOR = { train: window.dapoCharts.color(0), val: window.dapoCharts.color(3) };
  const LABEL = { train: "train", val: "validation" };
  let current = { split: "train", step: null };

  function traces(chart) {
    return chart.series.map((s) => ({
      x: s.steps.slice(), y: s.values.slice(), type: "scatter", mode: s.steps.length > 60 ? "lines" : "lines+markers",
      name: LABEL[s.split], meta: s.split, marker: { size: 5 },
      line: { width: s.split === current.split ? 2 : 1.2, dash: s.split === "val" ? "dot" : "solid", color: COLOR[s.split] },
      opacity: s.split === current.split ? 1 : 0.55,
      hovertemplate: `${LABEL[s.split]} step %{x}: %{y:.4g}<br>click: its samples<extra>${window.dapoPlotText(s.metric)}</extra>`,
    }));
  }
  function span(chart) {
    const steps = chart.series.flatMap((s) => s.steps);
    return steps.length ? Math.max(...steps) - Math.min(...steps) : 0;
  }
  function layout(chart) {
    const shapes = current.step === null ? [] : [{ type: "line", xref: "x", yref: "paper", x0: current.step, x1: current.step,
      y0: 0, y1: 1, line: { color: window.dapoCharts.muted(), width: 1.2, dash: "dash" } }];
    return window.dapoCharts.layout({
      title: { text: chart.title, font: { size: 12 }, x: 0.02 }, height: 180, margin: { l: 40, r: 8, t: 26, b: 24 },
      showlegend: false, shapes, hovermode: "closest", font: { size: 10 },
      xaxis: { tickformat: "d", dtick: span(chart) <= 12 ? 1 : undefined }, yaxis: { tickformat: ".3~g" }, // no "5 5 6 6"
    });
  }
  function draw(chart) {
    if (!chart.series.length) {
      chart.el.replaceChildren();
      chart.el.appendChild(Object.assign(document.createElement("div"), { className: "curve-empty",
        textContent: `${chart.title}: not logged yet` }));
      chart.plotted = false;
      return;
    }
    if (!chart.plotted) chart.el.replaceChildren();
    Plotly.react(chart.el, traces(chart), layout(chart), { displaylogo: false, responsive: true, displayModeBar: false });
    if (!chart.plotted) {
      chart.el.on("plotly_click", (ev) => {
        const point = ev.points && ev.points[0];
        if (point && window.dapoInspector) window.dapoInspector.goTo(point.data.meta, Math.round(point.x));
      });
      chart.plotted = true;
    }
  }

  const box = $("inspector-curves");
  for (const chart of charts) {
    chart.el = document.createElement("div");
    chart.el.className = "curve";
    chart.el.dataset.title = chart.title;
    box.appendChild(chart.el);
  }

  document.addEventListener("inspector:step", (e) => {
    const { split, step, snappedFrom } = e.detail;
    current = { split, step };
    for (const chart of charts) draw(chart);
    const note = $("snap-note");
    note.hidden = snappedFrom === null || snappedFrom === undefined || step === null;
    note.textContent = note.hidden ? "" : `Step ${snappedFrom} has no ${LABEL[split]} samples: showing step ${step}, the nearest that has.`;
    document.body.dataset.curveStep = step === null ? "" : String(step);
  });

  // Live steps: a step event carries {name: value}; a snapshot or catch-up {name: {steps, values}}.
  document.addEventListener("inspector:metrics", (e) => {
    const ev = e.detail;
    let changed = false;
    for (const chart of charts) {
      for (const split of ["train", "val"]) {
        const metric = chart.metrics[split];
        const pts = !metric || !ev.metrics || !(metric in ev.metrics) ? null
          : ev.type === "step" ? { steps: [ev.step], values: [ev.metrics[metric]] } : ev.metrics[metric];
        if (!pts) continue;
        let s = chart.series.find((x) => x.split === split);
        if (!s) { s = { split, metric, steps: [], values: [] }; chart.series.push(s); chart.series.sort((a, b) => (a.split === "val") - (b.split === "val")); }
        const last = s.steps.length ? s.steps[s.steps.length - 1] : -Infinity;
        pts.steps.forEach((step, i) => { if (step > last) { s.steps.push(step); s.values.push(pts.values[i]); changed = true; } });
      }
    }
    if (changed) for (const chart of charts) draw(chart);
  });
})();
