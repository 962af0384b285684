// The dataset pages. List: checks file sizes before an upload is sent and shows that it is on its way.
// Browser: draws the split's statistics (answer distribution, prompt lengths in characters and tokens) from
// the embedded JSON, opens a row on click, and moves between problems with the arrow keys.
// Dataset text reaches the page only as text: textContent here, and plotly labels with < > & escaped
// (plotly reads a few HTML tags in labels).
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);

  // ---- list page: upload --------------------------------------------------------------------------

  const upload = $("upload-form");
  if (upload) {
    const limitMb = Number(upload.dataset.maxBytes);
    const note = $("upload-client-error");
    upload.addEventListener("submit", (e) => {
      const big = [...upload.querySelectorAll("input[type=file]")]
        .flatMap((input) => [...input.files])
        .find((f) => f.size > limitMb * 1024 * 1024);
      if (big) {
        e.preventDefault();
        note.textContent = `${big.name} is ${(big.size / 1048576).toFixed(0)} MB, over the upload limit of ${limitMb} MB. ` +
          "Register a file on the server instead.";
        note.hidden = false;
        return;
      }
      note.hidden = true;
      const button = $("upload-btn");
      button.disabled = true;
      button.textContent = "Uploading and importing…";
    });
  }
  const register = $("register-form");
  if (register) {
    register.addEventListener("submit", () => {
      const button = $("register-btn");
      button.disabled = true;
      button.textContent = "Importing…";
    });
  }

  // ---- dataset page: rows (wired before the charts draw, so a click while plotly works is not lost) ---

  const table = $("rows-table");
  if (table) {
    table.addEventListener("click", (e) => {
      if (e.target.closest("a")) return;
      const tr = e.target.closest("tr[data-href]");
      if (tr) window.location.search = tr.dataset.href.slice(1);
    });
    for (const id of ["f-model", "f-source", "f-solved"]) {
      const select = $(id);
      if (select) select.addEventListener("change", () => select.form.submit());
    }
    document.addEventListener("keydown", (e) => {
      if (e.target.closest("input, select, textarea") || e.altKey || e.ctrlKey || e.metaKey) return;
      const link = { ArrowLeft: $("row-prev"), ArrowRight: $("row-next"), Escape: $("row-close") }[e.key];
      if (link) window.location.href = link.href;
    });
    const selected = table.querySelector("tr.ds-selected");
    if (selected) selected.scrollIntoView({ block: "nearest" });
  }

  // ---- dataset page: statistics ------------------------------------------------------------------

  const statsEl = $("ds-stats");
  if (!statsEl) return;
  const stats = JSON.parse(statsEl.textContent);
  const params = new URLSearchParams(window.location.search);

  const LAYOUT = window.dapoCharts.layout({
    margin: { l: 48, r: 12, t: 30, b: 40 },
    height: 300,
    showlegend: false,
    bargap: 0.08,
  });
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const plain = window.dapoPlotText; // plot_text.js
  const short = (s, n) => (s.length > n ? s.slice(0, n - 1) + "…" : s);
  const title = (text) => ({ text: plain(text), font: { size: 12 }, x: 0.02 });

  function empty(el, text) {
    el.classList.add("ds-chart-empty");
    const p = document.createElement("p");
    p.className = "muted small";
    p.textContent = text;
    el.replaceChildren(p);
  }

  function drawAnswers() {
    const el = $("chart-answers");
    const top = stats.top_answers || [];
    if (!top.length) return empty(el, "No rows.");
    const rows = top.slice().reverse(); // plotly draws the first category at the bottom
    const ys = rows.map((_, i) => i); // positions, not categories: two answers may share a shortened label
    const trace = {
      type: "bar", orientation: "h", x: rows.map((a) => a.count), y: ys,
      customdata: rows.map((a) => plain(a.value)), marker: { color: window.dapoCharts.color(0) },
      hovertemplate: "answer %{customdata}: %{x} problems<extra></extra>",
    };
    const other = stats.other_answers ? ` · ${stats.other_answers} problems have others` : "";
    const layout = { ...LAYOUT, margin: { ...LAYOUT.margin, l: 90 },
      title: title(`Top ${top.length} of ${stats.answers} answers${other}`),
      yaxis: { ...LAYOUT.yaxis, automargin: true, tickmode: "array", tickvals: ys,
        ticktext: rows.map((a) => plain(short(a.value, 24))), tickfont: { family: "ui-monospace, monospace", size: 10 } },
      xaxis: { ...LAYOUT.xaxis, title: { text: "problems" }, tick0: 0, tickformat: "d", // counts: whole numbers
        dtick: Math.max(1, Math.ceil(Math.max(...rows.map((a) => a.count)) / 6)) } };
    Plotly.newPlot(el, [trace], layout, CONFIG);
    // a click on a bar filters the rows by that answer
    el.on("plotly_click", (ev) => {
      const i = ev.points[0].pointIndex;
      const next = new URLSearchParams({ split: params.get("split") || "train", answer: rows[i].value });
      if (params.get("model")) next.set("model", params.get("model"));
      window.location.search = next.toString();
    });
  }

  function drawHistogram(id, hist, text, axis, color) {
    const el = $(id);
    if (!hist || !hist.edges || !hist.edges.length) return empty(el, "No rows.");
    const width = hist.edges.length > 1 ? hist.edges[1] - hist.edges[0] : 1;
    const trace = {
      type: "bar", x: hist.edges.map((e) => e + width / 2), y: hist.counts, width: width * 0.95,
      customdata: hist.edges.map((e) => `${e}–${e + width - 1}`), marker: { color },
      hovertemplate: `%{customdata} ${axis}: %{y} problems<extra></extra>`,
    };
    const layout = { ...LAYOUT, title: title(text), xaxis: { ...LAYOUT.xaxis, title: { text: axis } },
      yaxis: { ...LAYOUT.yaxis, title: { text: "problems" } } };
    Plotly.newPlot(el, [trace], layout, CONFIG);
  }

  drawAnswers();
  drawHistogram("chart-chars", stats.chars, "Prompt length (characters)", "characters", window.dapoCharts.color(2));
  const tokens = stats.tokens || {};
  if (tokens.error) empty($("chart-tokens"), `Token lengths unavailable: ${tokens.error}.`);
  else drawHistogram("chart-tokens", tokens.histogram, `Prompt tokens with ${tokens.model}'s chat template`, "tokens", window.dapoCharts.color(4));
})();
