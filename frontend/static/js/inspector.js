// The rollout inspector (/runs/<id>/samples/) and the problem timeline chart (/runs/<id>/problems/<i>/).
// Inspector: the page embeds its first view (json_script); a step change (slider, ◀ ▶, arrow keys), a
// filter or a page fetches the same data as JSON from samples/data/ and the URL follows (shareable). The
// run's websocket tells of new steps: the slider's range grows (and, with "follow newest", moves).
// Model output is only ever set with textContent: it is never parsed as HTML.
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };
  const fmt = (v, digits = 3) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits).replace(/\.?0+$/, "") || "0");
  // The reward cell, broken into its parts when it has several (each reward of data.reward_fn, weighted, and
  // the overlong penalty): the total, then one line per part; each one's own score on hover.
  let rewardWeights = {};
  const rewardCell = (s) => {
    const td = el("td", "num reward-cell", null);
    td.appendChild(el("span", "reward-total", fmt(s.reward)));
    const parts = Object.entries(s.reward_scores || {});
    const lines = parts.length > 1 ? parts.map(([name, v]) => {
      const w = rewardWeights[name] ?? 1;
      return `${name} ${fmt(v)}${w !== 1 ? ` × ${fmt(w)}` : ""}`;
    }) : [];
    if (s.overlong_penalty) lines.push(...(parts.length > 1 ? [] : [`score ${fmt(s.score)}`]), `overlong ${fmt(s.overlong_penalty)}`);
    if (lines.length) {
      const box = el("span", "reward-parts-inline");
      for (const line of lines) box.appendChild(el("span", "rpart", line));
      td.appendChild(box);
      td.title = [...parts.map(([name, v]) => `${name}: ${fmt(v)} (weight ${fmt(rewardWeights[name] ?? 1)})`),
        `overlong penalty: ${fmt(s.overlong_penalty)}`].join("\n");
      td.classList.add("has-parts");
    }
    return td;
  };
  // The badge of why the step did not train on a sample or a group (inspector.discards.REASONS).
  const REASON_LABELS = { all_correct: "dropped: all correct", all_wrong: "dropped: all wrong",
    no_variance: "dropped: no variance", surplus: "surplus: batch full", overlong: "overlong-filtered" };
  const reasonBadge = (reason, help) => {
    if (!reason || !REASON_LABELS[reason]) return null;
    const b = el("span", "rbadge", REASON_LABELS[reason]);
    b.dataset.reason = reason;
    if (help) b.title = help;
    return b;
  };
  const pct = (v) => (v === null || v === undefined ? "–" : `${Math.round(100 * v)}%`);

  if ($("inspector-data")) inspector(JSON.parse($("inspector-data").textContent), JSON.parse($("inspector-urls").textContent));
  if ($("problem-data")) problemChart(JSON.parse($("problem-data").textContent));

  function inspector(initial, urls) {
    let state = initial;
    let steps = initial.steps.slice();
    let split = initial.split;
    let pending = null; // AbortController of the fetch in flight
    let seq = 0;
    const form = $("filter-form");
    const FILTERS = ["acc", "kept", "truncated", "tokens", "reward_min", "reward_max", "length_min", "length_max",
      "q", "sort", "view", "rank", "k", "rank_by", "problem", "reason", "part", "part_op", "part_value"];

    // ---- state <-> form and URL ---------------------------------------------------------------

    function fillForm(filter) {
      for (const name of FILTERS) {
        const input = $(`f-${name}`);
        if (input) input.value = filter[name] === undefined ? (input.tagName === "SELECT" ? input.options[0].value : "") : String(filter[name]);
      }
    }
    function params(changes = {}) {
      const p = new URLSearchParams();
      p.set("split", split);
      if (state.step !== null && state.step !== undefined) p.set("step", state.step);
      for (const name of FILTERS) {
        const v = $(`f-${name}`).value.trim();
        const dflt = { sort: "index", view: "groups", rank_by: "reward" }[name] || "";
        if ((name === "part_op" || name === "part_value") && !$("f-part").value) continue;
        if (v !== "" && v !== dflt) p.set(name, v);
      }
      if (state.page > 1) p.set("page", state.page);
      for (const [k, v] of Object.entries(changes)) {
        if (v === null || v === "") p.delete(k); else p.set(k, v);
      }
      return p;
    }
    async function load(changes) {
      const p = params(changes);
      if (pending) pending.abort();
      pending = new AbortController();
      const mine = ++seq;
      document.body.classList.add("loading");
      try {
        const resp = await fetch(`${urls.data}?${p}`, { headers: { Accept: "application/json" }, signal: pending.signal });
        const body = await resp.json();
        if (mine !== seq) return;
        if (!resp.ok) { showError(body.error || `The server answered ${resp.status}.`); return; }
        showError("");
        state = body;
        steps = body.steps.slice();
        split = body.split;
        history.replaceState(null, "", `${urls.page}?${p}`);
        render();
      } catch (err) {
        if (err.name !== "AbortError") showError(`Could not load the samples: ${err.message}`);
      } finally {
        if (mine === seq) document.body.classList.remove("loading");
      }
    }
    function showError(text) { $("inspector-error").hidden = !text; $("inspector-error").textContent = text; }

    // ---- step bar ---------------------------------------------------------------------------------

    function renderStepBar() {
      const slider = $("step-slider");
      slider.max = Math.max(0, steps.length - 1);
      const i = steps.indexOf(state.step);
      slider.value = i < 0 ? steps.length - 1 : i;
      slider.disabled = steps.length < 2;
      $("step-label").textContent = state.step === null ? "–" : state.step;
      $("step-range").textContent = steps.length ? `of ${steps[0]}–${steps[steps.length - 1]} (${steps.length} steps with ${split === "val" ? "validation" : "train"} samples)` : "";
      $("step-prev").disabled = i <= 0;
      $("step-next").disabled = i < 0 || i >= steps.length - 1;
      for (const s of ["train", "val"]) {
        const b = $(`split-${s}`);
        b.classList.toggle("active", s === split);
        b.setAttribute("aria-pressed", String(s === split));
        b.disabled = s !== split && !state.other_split_has_samples;
        b.title = b.disabled ? `No ${s === "val" ? "validation" : "train"} samples in this run yet` : "";
      }
    }
    let slideTimer = null;
    function goToIndex(i) {
      if (!steps.length) return;
      i = Math.max(0, Math.min(steps.length - 1, i));
      $("step-slider").value = i;
      $("step-label").textContent = steps[i];
      clearTimeout(slideTimer);
      slideTimer = setTimeout(() => load({ step: steps[i], page: null }), 120);
    }
    const index = () => Number($("step-slider").value);
    $("step-slider").addEventListener("input", () => goToIndex(index()));
    $("step-prev").addEventListener("click", () => goToIndex(index() - 1));
    $("step-next").addEventListener("click", () => goToIndex(index() + 1));
    document.addEventListener("keydown", (e) => {
      if (e.altKey || e.ctrlKey || e.metaKey || (e.key !== "ArrowLeft" && e.key !== "ArrowRight")) return;
      if (e.target.closest && e.target.closest("input, select, textarea")) return; // the slider moves itself
      e.preventDefault();
      goToIndex(index() + (e.key === "ArrowLeft" ? -1 : 1));
    });
    for (const s of ["train", "val"]) {
      $(`split-${s}`).addEventListener("click", () => {
        if (s === split) return;
        split = s;
        state.step = null; // the newest step of the other split
        load({ step: null, page: null, split: s });
      });
    }
    form.addEventListener("submit", (e) => { e.preventDefault(); load({ page: null }); });
    for (const name of ["acc", "kept", "truncated", "tokens", "sort", "view", "rank", "rank_by", "reason"]) {
      $(`f-${name}`).addEventListener("change", () => load({ page: null }));
    }
    $("f-reset").addEventListener("click", () => { fillForm({}); load({ page: null }); });
    $("page-prev").addEventListener("click", () => load({ page: state.page - 1 }));
    $("page-next").addEventListener("click", () => load({ page: state.page + 1 }));

    // ---- results ------------------------------------------------------------------------------------

    function render() {
      rewardWeights = state.reward_weights || {};
      renderStepBar();
      renderSummary();
      renderDiscards();
      renderExports();
      const results = $("results");
      results.replaceChildren();
      const empty = $("results-empty");
      empty.hidden = true;
      if (state.step === null) {
        empty.hidden = false;
        empty.textContent = `No ${split === "val" ? "validation" : "train"} samples yet: they appear here as the run records steps.`;
      } else if (state.view === "groups") {
        for (const g of state.groups) results.appendChild(groupCard(g));
        if (!state.groups.length) { empty.hidden = false; empty.textContent = nothing(); }
      } else {
        results.appendChild(sampleTable(state.samples, true));
        if (!state.samples.length) { empty.hidden = false; empty.textContent = nothing(); }
      }
      const pager = $("pager");
      pager.hidden = !(state.pages > 1);
      $("page-label").textContent = `page ${state.page} of ${state.pages}`;
      $("page-prev").disabled = state.page <= 1;
      $("page-next").disabled = state.page >= state.pages;
      // the curves beside the samples (inspector_curves.js) mark the step
      document.dispatchEvent(new CustomEvent("inspector:step", { detail: { split, step: state.step, steps, snappedFrom: state.snapped_from } }));
    }
    function nothing() {
      if (state.page > state.pages) return `Page ${state.page} is past the last page (${state.pages}).`;
      return "No sample of this step matches the filter.";
    }
    function groupLink(step, group) { // the page of the unfiltered step that holds the group
      const page = Math.floor(group / state.groups_per_page) + 1;
      return `${urls.page}?split=${split}&step=${step}${page > 1 ? `&page=${page}` : ""}#group-${group}`;
    }
    function renderSummary() {
      const box = $("summary");
      box.replaceChildren();
      const s = state.summary;
      if (!s) return;
      const facts = [
        ["samples", s.samples], ["groups", s.groups], ["accuracy", pct(s.samples ? s.correct / s.samples : null)],
        ["mean reward", fmt(s.mean_reward)], ["mean length", fmt(s.mean_length, 1)], ["truncated", s.truncated],
        ["with token data", s.with_tokens],
      ];
      if (split === "train") facts.splice(2, 0, ["kept groups", `${s.kept_groups} / ${s.groups}`]);
      for (const [k, v] of facts) {
        const item = el("span", "fact");
        item.append(el("span", "label", k), " ", el("strong", null, v));
        box.appendChild(item);
      }
      const f = state.filter;
      const ranked = f.rank ? `: the ${f.rank} ${f.k || 10} by ${f.rank_by || "reward"}` : "";
      if (state.narrows) box.appendChild(el("span", "fact matching", `${state.matching} match the filter${ranked}`));
      if (f.problem !== undefined) {
        const chip = el("span", "fact chip", `problem ${f.problem} only `);
        const clear = el("button", "linkbtn", "show all problems");
        clear.type = "button";
        clear.id = "clear-problem";
        clear.addEventListener("click", () => { $("f-problem").value = ""; load({ problem: null, page: null }); });
        chip.appendChild(clear);
        box.appendChild(chip);
      }
    }
    // A train step's groups by why they were (not) trained: stored against the trainer's logged counts, with
    // what a capped step left out; each count filters the rows to that reason.
    function renderDiscards() {
      const box = $("discards");
      box.replaceChildren();
      const d = state.discards;
      box.hidden = !d;
      if (!d) return;
      box.appendChild(el("span", "label", "By reason"));
      for (const row of d.rows) {
        if (!row.stored && !row.logged) continue;
        const item = el("button", "fact linkbtn reason-count");
        item.type = "button";
        item.dataset.reason = row.reason;
        item.title = row.help;
        const count = `${row.stored}${row.unit === "samples" ? " samples" : ""}`;
        item.append(el("span", "label", row.label), " ", el("strong", null, count));
        if (row.not_stored) item.appendChild(el("span", "not-stored", ` (${row.not_stored} more not stored)`));
        if (row.logged !== null && row.logged !== undefined && row.logged !== row.stored) item.title += ` Logged: ${row.logged}.`;
        item.addEventListener("click", () => { $("f-reason").value = row.reason; load({ page: null }); });
        box.appendChild(item);
      }
      if (d.not_stored) {
        const cap = d.cap >= 0 ? ` (logging.samples_per_step = ${d.cap})` : "";
        box.appendChild(el("span", "fact not-stored", `${d.not_stored} of ${d.generated_samples} generated samples not stored${cap}`));
      }
    }
    function renderExports() {
      const whole = new URLSearchParams({ split, step: state.step ?? "" });
      const filtered = params({ page: null, view: null });
      for (const f of ["jsonl", "csv", "parquet"]) {
        $(`export-step-${f}`).href = `${urls.export}.${f}?${whole}`;
        $(`export-filter-${f}`).href = `${urls.export}.${f}?${filtered}`;
      }
      for (const node of document.querySelectorAll(".filtered-exports")) node.hidden = !state.narrows;
      $("exports").hidden = state.step === null;
    }
    function groupCard(g) {
      const card = el("section", "card group");
      card.id = `group-${g.group}`;
      const head = el("header", "group-head");
      const badge = el("span", "gbadge", g.badge.label);
      badge.dataset.kind = g.badge.kind;
      badge.dataset.kept = g.badge.kept;
      const problem = el("a", null, `problem ${g.problem} timeline`);
      problem.href = `${urls.problem}${g.problem}/?split=${split}`;
      const columns = el("a", "side-by-side", "side by side");
      columns.href = `${urls.page}step/${state.step}/group/${g.group}/?split=${split}`;
      head.append(el("h3", null, `Group ${g.group}`), badge);
      const why = g.reason_badge && reasonBadge(g.reason_badge.reason, g.reason_badge.help);
      if (why) head.appendChild(why);
      const overlong = g.overlong_n ? ` · ${g.overlong_n} overlong-filtered` : "";
      head.append(el("span", "muted small", `${g.correct}/${g.n} correct · mean reward ${fmt(g.mean_reward)}${overlong}`), problem, columns);
      const body = el("div", "group-body");
      const prompt = el("div", "group-prompt");
      const cut = g.prompt_chars > g.prompt_text.length ? ` (first ${g.prompt_text.length} of ${g.prompt_chars} characters)` : "";
      prompt.append(el("h4", null, `Prompt${cut}`), el("pre", "text clamp", g.prompt_text));
      const truth = el("div", "group-truth");
      truth.append(el("h4", null, "Ground truth"), el("code", "truth", g.truth));
      body.append(prompt, truth);
      card.append(head, body, sampleTable(g.samples, false));
      if (g.samples.length < g.n) card.appendChild(el("p", "muted small", `${g.samples.length} of the group's ${g.n} samples match the filter.`));
      return card;
    }
    function sampleTable(samples, flat) {
      const wrap = el("div", "table-scroll");
      const table = el("table", "table compact sample-rows");
      const head = ["#", ...(flat ? ["Group", "Truth"] : []), "Prediction", "✓", "Reward", "Overlong", "Adv.", "Len", "Trunc.",
        ...(flat && split === "train" ? ["Kept"] : []), "Tokens", "Response"];
      const tr = el("tr");
      for (const h of head) tr.appendChild(el("th", ["Reward", "Overlong", "Adv.", "Len"].includes(h) ? "num" : null, h));
      const thead = el("thead");
      thead.appendChild(tr);
      const tbody = el("tbody");
      for (const s of samples) tbody.appendChild(sampleRow(s, flat));
      table.append(thead, tbody);
      wrap.appendChild(table);
      return wrap;
    }
    function sampleRow(s, flat) {
      const tr = el("tr", "clickable sample-row");
      tr.dataset.href = `${urls.sample}${s.id}/`;
      const link = el("a", null, s.sample_index);
      link.href = tr.dataset.href;
      const first = el("td");
      first.appendChild(link);
      const why = (flat || s.discard_reason === "overlong") && reasonBadge(s.discard_reason);
      if (why) first.append(" ", why);
      const cells = [first];
      if (flat) {
        const group = el("a", null, s.group);
        group.href = groupLink(s.step, s.group);
        const gtd = el("td");
        gtd.appendChild(group);
        cells.push(gtd, el("td", "truth", s.ground_truth));
      }
      cells.push(el("td", `pred ${s.acc ? "ok" : "bad"}`, s.pred), el("td", s.acc === null ? null : s.acc ? "ok" : "bad", s.acc === null ? "–" : s.acc ? "✓" : "✗"),
        rewardCell(s), el("td", "num", s.overlong_penalty ? fmt(s.overlong_penalty) : ""),
        el("td", "num", fmt(s.advantage)), el("td", "num", s.length === null ? "–" : s.length), el("td", null, s.truncated ? "yes" : ""));
      if (flat && split === "train") cells.push(el("td", null, s.kept ? "kept" : "filtered"));
      cells.push(el("td", "tok", s.has_tokens ? "●" : ""));
      const more = s.chars > s.preview.length ? "…" : "";
      cells.push(el("td", "response", s.preview.replace(/\s+/g, " ") + more));
      tr.append(...cells);
      return tr;
    }
    $("results").addEventListener("click", (e) => {
      if (e.target.closest("a")) return;
      const tr = e.target.closest("tr.sample-row");
      if (tr) location.href = tr.dataset.href;
    });

    // ---- live: new steps grow the slider ---------------------------------------------------------

    let refreshTimer = null;
    async function refreshSteps() {
      try {
        const resp = await fetch(`${urls.steps}?split=${split}`, { headers: { Accept: "application/json" } });
        if (!resp.ok) return;
        const body = await resp.json();
        if (body.split !== split) return;
        const wasNewest = state.step === steps[steps.length - 1];
        steps = body.steps;
        state.steps = steps;
        const newest = steps[steps.length - 1];
        if (state.step === null && steps.length) load({ step: newest, page: null });
        else if ($("follow").checked && wasNewest && newest !== state.step) load({ step: newest, page: null });
        else renderStepBar();
      } catch (err) { /* the next event tries again */ }
    }
    function stepsChanged() { clearTimeout(refreshTimer); refreshTimer = setTimeout(refreshSteps, 250); }
    function onEvent(ev) {
      if (ev.type === "step" || ev.type === "snapshot" || ev.type === "catchup") {
        if (ev.run) state.run.step = ev.run.step;
        stepsChanged();
        document.dispatchEvent(new CustomEvent("inspector:metrics", { detail: ev })); // the curves grow
      }
      if (ev.run) {
        $("run-status").textContent = ev.run.status;
        $("run-status").dataset.status = ev.run.status;
      }
    }

    // A click on a curve: that split's samples at that step, or at the nearest step that has samples.
    window.dapoInspector = {
      goTo(toSplit, step) {
        if (toSplit !== split) { split = toSplit; state.step = null; }
        load({ split: toSplit, step, near: 1, page: null });
      },
    };
    fillForm(initial.filter);
    render();
    window.dapoLive.connect({
      runId: state.run.id, after: () => Math.max(state.run.step, 0), onEvent, indicator: $("live-indicator"),
    });
    window.dapoLive.mark("__inspectorReady", true); // bench/inspect_scale.py (opt-in)
  }

  // ---- problem timeline ----------------------------------------------------------------------------

  function stepSpan(series) {
    const steps = series.flatMap((s) => s.steps);
    return steps.length ? Math.max(...steps) - Math.min(...steps) : 0;
  }
  function problemChart(data) {
    const traces = data.series.map((s, i) => ({
      x: s.steps, y: s.rates, type: "scatter", mode: s.steps.length > 40 ? "lines" : "lines+markers",
      name: window.dapoPlotText(`${s.this ? "this run" : `#${s.run} ${s.name}`} · ${s.split === "val" ? "validation" : "train"}`),
      line: { width: s.this ? 2.4 : 1.3, dash: s.split === "val" ? "dot" : "solid", color: window.dapoCharts.color(i) },
      opacity: s.this ? 1 : 0.75, marker: { size: 5 },
      customdata: s.n.map((n, j) => [s.correct[j], n]),
      hovertemplate: "step %{x}: %{y:.0%} (%{customdata[0]}/%{customdata[1]})<extra>%{fullData.name}</extra>",
    }));
    // A train problem comes round once per pass over the data, so its curve is often one or two points:
    // draw them large and say why, rather than leave a lone dot on a fractional step axis.
    const own = data.series.find((s) => s.this);
    const sparse = own && own.steps.length <= 2;
    if (sparse) traces.forEach((t, i) => { if (data.series[i].this) t.marker = { size: 11 }; });
    const note = sparse ? [{ xref: "paper", yref: "paper", x: 0.5, y: 1, yanchor: "top", showarrow: false,
      font: { size: 11, color: window.dapoCharts.muted() },
      text: `this run drew this problem at ${own.steps.length} step${own.steps.length === 1 ? "" : "s"} so far: ` +
        (own.split === "val" ? "validation samples it at each validation" : "a train problem comes round once per pass over the data") }] : [];
    const layout = window.dapoCharts.layout({
      margin: { l: 50, r: 10, t: 10, b: 40 },
      height: 340,
      legend: { orientation: "h", y: -0.2 },
      annotations: note,
      // a few steps: one tick per step (auto ticks at half steps read "4 5 5 6 6" once rounded)
      xaxis: { title: { text: "step" }, tickformat: "d", dtick: stepSpan(data.series) <= 12 ? 1 : undefined },
      yaxis: { title: { text: "pass rate" }, range: [-0.03, 1.03], tickformat: ".0%" },
    });
    Plotly.newPlot($("problem-chart"), traces, layout, { displaylogo: false, responsive: true });
  }
})();
