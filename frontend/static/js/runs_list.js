// The runs list: rows drawn from the embedded data, then refreshed from /api/runs/ every few seconds
// (with the page's filters) while the tab is visible. Text is set with textContent only.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 3000;
  const selected = new Set(); // run ids ticked for comparison or a bulk action (kept across refreshes)
  const groupOf = new Map(); // run id -> {name, url} of its run group
  let shown = [];
  const initial = JSON.parse($("runs-data").textContent); // {rows, columns, error}
  const columns = initial.columns || []; // extra columns: config keys or metric names
  const sortInput = $("filter-sort");

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
    const what = r.kind === "evaluation" ? "evaluation" : r.kind === "external" ? `${r.source === "trl" ? "TRL" : r.source} run` : r.preset || "custom";
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
    tick.setAttribute("aria-label", `Select ${r.name}`);
    const k = r.key_metrics;
    if (r.tags && r.tags.length) {
      const tags = document.createElement("div");
      tags.className = "tags";
      for (const t of r.tags) tags.append(Object.assign(document.createElement("span"), { className: "tag", textContent: t }));
      name.append(tags);
    }
    if (r.archived) sub.append(" · archived");
    const extra = columns.map((c) => td(cellText((r.columns || {})[c]), "num col-extra"));
    tr.append(td(tick, "select-cell"), td(name), td(badge), td(prog), td(fmt(k.reward, 3), "num"), td(fmt(k.train_acc, 3), "num"),
      td(fmt(k.val_acc, 3), "num"), td(fmt(k.entropy, 3), "num"), td(sparkline(r.sparkline)),
      td(when(r.created_at), "small nowrap"), ...extra);
    return tr;
  }
  function cellText(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : Number(v.toPrecision(4)).toString();
    return typeof v === "string" ? v : JSON.stringify(v);
  }
  // Headers: the extra columns after the fixed ones; a header with a field sorts by it (again: reversed).
  function renderHead() {
    const head = $("runs-head");
    for (const c of columns) {
      const th = document.createElement("th");
      th.className = "num col-extra"; th.dataset.sort = c; th.textContent = c;
      head.append(th);
    }
    const [field, desc] = sortInput.value.startsWith("-") ? [sortInput.value.slice(1), true] : [sortInput.value || "created", !sortInput.value];
    for (const th of head.querySelectorAll("th[data-sort]")) {
      const button = document.createElement("button");
      button.type = "button"; button.className = "sortbtn";
      button.append(...th.childNodes);
      const active = th.dataset.sort === field;
      th.setAttribute("aria-sort", active ? (desc ? "descending" : "ascending") : "none");
      if (active) button.append(desc ? " ↓" : " ↑");
      button.addEventListener("click", () => {
        sortInput.value = active && !desc ? `-${th.dataset.sort}` : th.dataset.sort;
        $("filters").submit();
      });
      th.replaceChildren(button);
    }
  }
  function render(rows) {
    shown = rows;
    $("runs-body").replaceChildren(...rows.map(row));
    // an unreadable filter matched nothing because it was not run: its error says so, not "No runs match"
    $("runs-empty").hidden = rows.length > 0 || !$("filter-error").hidden;
    renderSelection();
  }
  function renderSelection() {
    const button = $("compare-selected");
    button.disabled = selected.size < 2;
    button.textContent = selected.size ? `Compare selected (${selected.size})` : "Compare selected";
    $("select-all").checked = shown.length > 0 && shown.every((r) => selected.has(r.id));
    for (const b of $("bulk-form").querySelectorAll("button")) b.disabled = selected.size === 0;
    $("bulk-count").textContent = selected.size
      ? `${selected.size} run${selected.size > 1 ? "s" : ""} ticked: only your own are changed.`
      : "Tick runs to act on several at once (your own runs only).";
  }
  function tickedIds() {
    const ids = shown.map((r) => r.id).filter((id) => selected.has(id)); // in the list's order
    for (const id of selected) if (!ids.includes(id)) ids.push(id); // ticked, then filtered out of view
    return ids;
  }
  // Cancel, archive, restore, delete: the server acts on the ticked runs the user owns and says which it
  // refused; delete shows a page that lists them and asks once more. The list comes back as it was.
  $("bulk-form").addEventListener("submit", () => {
    $("bulk-ids").value = tickedIds().join(",");
    $("bulk-back").value = location.search;
  });
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
    location.href = `/runs/compare/?ids=${tickedIds().join(",")}`;
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
      if (resp.status === 400) { // the filter box was edited into something unreadable: say so, keep the rows
        const body = await resp.json();
        const [field, message] = Object.entries(body)[0] || ["filter", "cannot be read"];
        $("filter-error").textContent = `${field}: ${message}`;
        $("filter-error").hidden = false;
        $("runs-empty").hidden = true;
        return;
      }
      if (!resp.ok) throw new Error(resp.status);
      $("filter-error").hidden = true; // the box reads again
      render((await resp.json()).results);
      $("live-indicator").dataset.state = "live";
    } catch (err) {
      $("live-indicator").dataset.state = "wait";
    }
  }
  $("filter-status").addEventListener("change", () => $("filters").submit());
  $("filter-archived").addEventListener("change", () => $("filters").submit());
  renderHead();
  render(initial.rows);
  loadGroups();
  $("live-indicator").dataset.state = "live";
  if (!initial.error || !initial.error.field) setInterval(poll, POLL_MS); // an unreadable filter: no polling
  document.addEventListener("visibilitychange", poll);
})();
