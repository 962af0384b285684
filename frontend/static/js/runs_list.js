// The runs list: rows drawn from the embedded data, then refreshed from /api/runs/ every few seconds
// (with the page's filters) while the tab is visible. Text is set with textContent only.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 3000;
  const selected = new Set(); // run ids ticked for comparison (kept across refreshes)
  const groupOf = new Map(); // run id -> {name, url} of its run group
  let shown = [];

  const fmt = window.dapoCharts.fixed;
  function sparkline(values) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 120 28");
    svg.setAttribute("class", "sparkline");
    const pts = values.filter((v) => v !== null);
    if (pts.length < 2) return svg;
    const lo = Math.min(...pts), hi = Math.max(...pts), span = hi - lo || 1;
    const d = pts.map((v, i) => `${(i / (pts.length - 1)) * 118 + 1},${27 - ((v - lo) / span) * 26}`).join(" ");
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", d);
    svg.appendChild(line);
    return svg;
  }
  function when(iso) { // 2026-12-01 18:05 in the browser's time zone: one line, sorts as it reads
    const d = new Date(iso), p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
  }
  function td(content, cls) {
    const el = document.createElement("td");
    if (content instanceof Node) el.appendChild(content); else el.textContent = content;
    if (cls) el.className = cls;
    return el;
  }
  function row(r) {
    const tr = document.createElement("tr");
    tr.dataset.runId = r.id;
    const link = document.createElement("a");
    link.href = `/runs/${r.id}/`;
    link.textContent = r.name;
    const name = document.createElement("div");
    name.append(link);
    const sub = document.createElement("div");
    sub.className = "muted small";
    const what = r.kind === "evaluation" ? "evaluation" : r.preset || "custom";
    sub.textContent = `#${r.id} · ${what} · ${r.owner}`;
    name.append(sub);
    const badge = document.createElement("span");
    badge.className = "badge";
    badge.dataset.status = r.status;
    badge.textContent = r.cancel_requested && r.status === "running" ? "cancelling" : r.status;
    const prog = document.createElement("div");
    prog.className = "progress-cell";
    const bar = document.createElement("div");
    bar.className = "progress";
    const fill = document.createElement("div");
    fill.className = "progress-bar";
    fill.style.width = `${Math.round(100 * r.progress)}%`;
    bar.appendChild(fill);
    const label = document.createElement("span");
    label.className = "small muted";
    label.textContent = `${r.step} / ${r.total_steps}`;
    prog.append(bar, label);
    if (groupOf.has(r.id)) {
      const g = groupOf.get(r.id), chip = document.createElement("a");
      chip.className = "group-chip"; chip.href = g.url; chip.title = "Compare the runs of this group";
      chip.textContent = `${g.name} · compare`;
      sub.append(" ", chip);
    }
    const tick = document.createElement("input");
    tick.type = "checkbox"; tick.className = "select-run"; tick.value = r.id; tick.checked = selected.has(r.id);
    tick.setAttribute("aria-label", `Select ${r.name} for comparison`);
    const k = r.key_metrics;
    tr.append(td(tick, "select-cell"), td(name), td(badge), td(prog), td(fmt(k.reward, 3), "num"), td(fmt(k.train_acc, 3), "num"),
      td(fmt(k.val_acc, 3), "num"), td(fmt(k.entropy, 3), "num"), td(sparkline(r.sparkline)),
      td(when(r.created_at), "small nowrap"));
    return tr;
  }
  function render(rows) {
    shown = rows;
    $("runs-body").replaceChildren(...rows.map(row));
    $("runs-empty").hidden = rows.length > 0;
    renderSelection();
  }
  function renderSelection() {
    const button = $("compare-selected");
    button.disabled = selected.size < 2;
    button.textContent = selected.size ? `Compare selected (${selected.size})` : "Compare selected";
    $("select-all").checked = shown.length > 0 && shown.every((r) => selected.has(r.id));
  }
  $("runs-body").addEventListener("change", (e) => {
    if (!e.target.classList.contains("select-run")) return;
    const id = Number(e.target.value);
    if (e.target.checked) selected.add(id); else selected.delete(id);
    renderSelection();
  });
  $("select-all").addEventListener("change", (e) => {
    for (const r of shown) { if (e.target.checked) selected.add(r.id); else selected.delete(r.id); }
    render(shown);
  });
  $("compare-selected").addEventListener("click", () => {
    const ids = shown.map((r) => r.id).filter((id) => selected.has(id)); // in the list's order
    for (const id of selected) if (!ids.includes(id)) ids.push(id); // ticked, then filtered out of view
    location.href = `/runs/compare/?ids=${ids.join(",")}`;
  });
  // Run groups (an ablation ladder, a sweep): a "compare" link for each, and a chip on each member's row.
  async function loadGroups() {
    try {
      const resp = await fetch("/runs/compare/groups/", { headers: { Accept: "application/json" } });
      if (!resp.ok) return;
      const groups = (await resp.json()).groups;
      for (const g of groups) for (const id of g.ids) groupOf.set(id, g);
      const strip = $("group-strip");
      strip.replaceChildren(Object.assign(document.createElement("span"), { className: "muted", textContent: "Groups:" }),
        ...groups.map((g) => {
          const a = document.createElement("a");
          a.className = "group-chip"; a.href = g.url;
          a.textContent = `${g.name} · ${g.runs} runs · compare`;
          return a;
        }));
      strip.hidden = !groups.length;
      render(shown);
    } catch (err) { /* the list works without its groups */ }
  }
  async function poll() {
    if (document.hidden) return;
    const params = new URLSearchParams(new FormData($("filters")));
    try {
      const resp = await fetch(`/api/runs/?${params}`, { headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error(resp.status);
      render((await resp.json()).results);
      $("live-indicator").dataset.state = "live";
    } catch (err) {
      $("live-indicator").dataset.state = "wait";
    }
  }
  $("filter-status").addEventListener("change", () => $("filters").submit());
  render(JSON.parse($("runs-data").textContent));
  loadGroups();
  $("live-indicator").dataset.state = "live";
  setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", poll);
})();
