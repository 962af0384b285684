// The token view of one sample (/runs/<id>/samples/<pk>/): each response token coloured by its sampling
// log-prob, its entropy or its importance ratio at update time, tokens the DAPO loss clipped marked (the
// marks come from the server, computed from the run's ε_low, ε_high and c). Token text is set with
// textContent only: model output is never parsed as HTML.
(() => {
  "use strict";

  const data = JSON.parse(document.getElementById("token-data").textContent);
  const box = document.getElementById("tokens");
  const info = document.getElementById("token-info");
  const legend = document.getElementById("token-legend");
  const n = data.tokens.length;
  const finite = (xs) => (xs || []).filter((v) => v !== null && Number.isFinite(v));
  const maxEntropy = Math.max(0.5, ...finite(data.entropy));
  const CLIP_TEXT = { high: "clipped at 1+ε_high (A > 0)", low: "clipped at 1−ε_low (A < 0)", dual: "dual-clipped (ratio > c, A < 0)" };

  // Each mode: the value of token i, its background (null: no value), and the legend's stops.
  const MODES = {
    logprob: {
      value: (i) => data.logprob && data.logprob[i],
      colour: (v) => `rgba(220, 38, 38, ${(0.85 * (1 - Math.exp(v))).toFixed(3)})`,
      legend: () => [["p = 1", 0], ["p = 0.5", Math.log(0.5)], ["p = 0.1", Math.log(0.1)], ["p → 0", -20]],
      caption: "sampling probability p = exp(log-prob): the less likely the token, the redder",
    },
    entropy: {
      value: (i) => data.entropy && data.entropy[i],
      colour: (v) => `rgba(124, 58, 237, ${(0.85 * Math.min(1, v / maxEntropy)).toFixed(3)})`,
      legend: () => [["0 nats", 0], [`${(maxEntropy / 2).toFixed(2)}`, maxEntropy / 2], [`${maxEntropy.toFixed(2)} (this sample's max)`, maxEntropy]],
      caption: "entropy of the policy at the token (old policy, at update time)",
    },
    ratio: {
      value: (i) => data.ratio && data.ratio[i],
      colour: (v) => {
        const bound = v >= 1 ? data.clip_high : data.clip_low; // full colour at the clip boundary
        const a = (0.85 * Math.min(1, Math.abs(v - 1) / bound)).toFixed(3);
        return v >= 1 ? `rgba(234, 88, 12, ${a})` : `rgba(37, 99, 235, ${a})`;
      },
      legend: () => [[`1−ε_low = ${(1 - data.clip_low).toFixed(2)}`, 1 - data.clip_low], ["1", 1], [`1+ε_high = ${(1 + data.clip_high).toFixed(2)}`, 1 + data.clip_high]],
      caption: "importance ratio π_θ/π_old at the first optimiser step that used the token",
    },
  };
  let mode = "logprob";

  function tokenText(t) {
    if (t === "") return "∅";
    return t.replace(/\n/g, "↵\n").replace(/\t/g, "⇥\t");
  }
  function describe(i) {
    const parts = [`token ${i + 1}/${n}: ${JSON.stringify(data.tokens[i])}`];
    const lp = data.logprob && data.logprob[i];
    if (lp !== null && lp !== undefined) parts.push(`log-prob ${lp.toFixed(4)} (p = ${Math.exp(lp).toFixed(3)})`);
    const h = data.entropy && data.entropy[i];
    if (h !== null && h !== undefined) parts.push(`entropy ${h.toFixed(4)}`);
    const r = data.ratio && data.ratio[i];
    if (r !== null && r !== undefined) parts.push(`ratio ${r.toFixed(4)}`);
    const c = data.clip && data.clip[i];
    if (c) parts.push(CLIP_TEXT[c]);
    return parts.join(" · ");
  }
  function build() {
    const frag = document.createDocumentFragment();
    for (let i = 0; i < n; i++) {
      const span = document.createElement("span");
      span.className = "tok";
      span.dataset.i = i;
      span.textContent = tokenText(data.tokens[i]);
      if (data.tokens[i] === "") span.classList.add("empty-token");
      const c = data.clip && data.clip[i];
      if (c) { span.dataset.clip = c; span.classList.add("clipped"); }
      frag.appendChild(span);
    }
    box.replaceChildren(frag);
  }
  function paint() {
    const m = MODES[mode];
    for (const span of box.children) {
      const v = m.value(Number(span.dataset.i));
      const missing = v === null || v === undefined;
      span.style.background = missing ? "" : m.colour(v);
      span.classList.toggle("no-value", missing);
    }
    legend.replaceChildren();
    const caption = document.createElement("span");
    caption.className = "legend-caption";
    caption.textContent = m.caption;
    legend.appendChild(caption);
    for (const [label, v] of m.legend()) {
      const sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = m.colour(v);
      const item = document.createElement("span");
      item.className = "legend-item";
      item.append(sw, label);
      legend.appendChild(item);
    }
    for (const [kind, text] of Object.entries(CLIP_TEXT)) {
      if (!data.clip) break;
      const item = document.createElement("span");
      item.className = "legend-item";
      const sw = document.createElement("span");
      sw.className = "tok clipped swatch";
      sw.dataset.clip = kind;
      item.append(sw, `${text}: ${data.counts[kind]}`);
      legend.appendChild(item);
    }
    const none = document.createElement("span");
    none.className = "legend-item";
    const sw = document.createElement("span");
    sw.className = "swatch no-value";
    none.append(sw, "no value stored");
    legend.appendChild(none);
    box.dataset.mode = mode;
  }
  // The keyboard reads the tokens too: Tab to the text, then the arrow keys (Home, End) step through them.
  box.tabIndex = 0;
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", "Response tokens: use the arrow keys to read each token's values");
  info.setAttribute("aria-live", "polite");
  let current = -1;
  // Selecting a token (a click, or the arrow keys) tells whoever listens (token_explain.js) which one.
  function select(i) {
    const old = box.querySelector(".tok.selected");
    if (old) old.classList.remove("selected");
    const span = box.querySelector(`.tok[data-i="${i}"]`);
    if (span) span.classList.add("selected");
    box.dispatchEvent(new CustomEvent("token-select", { detail: { index: i }, bubbles: true }));
  }
  box.addEventListener("click", (e) => {
    const span = e.target.closest(".tok");
    if (!span || !box.contains(span)) return;
    current = Number(span.dataset.i);
    info.textContent = describe(current);
    select(current);
  });
  box.addEventListener("keydown", (e) => {
    const moves = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
    let next = current;
    if (e.key in moves) next = Math.min(n - 1, Math.max(0, current + moves[e.key]));
    else if (e.key === "Home") next = 0;
    else if (e.key === "End") next = n - 1;
    else return;
    e.preventDefault();
    const old = box.querySelector(".tok.current");
    if (old) old.classList.remove("current");
    current = next;
    const span = box.querySelector(`.tok[data-i="${current}"]`);
    if (!span) return;
    span.classList.add("current");
    span.scrollIntoView({ block: "nearest" });
    info.textContent = describe(current);
    select(current);
  });
  box.addEventListener("mouseover", (e) => {
    const span = e.target.closest(".tok");
    if (!span || !box.contains(span)) return;
    info.textContent = describe(Number(span.dataset.i));
    span.title = info.textContent;
  });
  for (const radio of document.querySelectorAll("input[name=colour-by]")) {
    radio.addEventListener("change", () => { if (radio.checked) { mode = radio.value; paint(); } });
  }
  if (!data.logprob) mode = data.entropy ? "entropy" : data.ratio ? "ratio" : "logprob";
  const checked = document.querySelector(`input[name=colour-by][value=${mode}]`);
  if (checked) checked.checked = true;
  build();
  paint();
  window.__tokenViewReady = true;
})();
