// The objective explainer of the token view (/runs/<id>/samples/<pk>/): when a token is selected
// (token_view.js sends "token-select"), show what the DAPO loss did with it at the sample's first optimiser
// step: old and new log-prob, ratio, the clip bounds, the advantage, the two surrogate terms, the rule that
// bound, the per-token loss, its weight and share of the mini-batch's loss under the run's aggregation mode,
// and the gradient on its log-prob. Every number comes from the server (dapo.algo.explain, the formulas of
// dapo.algo.loss); this script only lays them out, with textContent.
(() => {
  "use strict";

  const data = JSON.parse(document.getElementById("explain-data").textContent);
  const tokens = JSON.parse(document.getElementById("token-data").textContent).tokens;
  const body = document.getElementById("explain-body");
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };
  const num = (v, d = 4) => (v === null || v === undefined ? "–" : Math.abs(v) >= 1e-3 || v === 0 ? v.toFixed(d) : v.toExponential(3));
  const WEIGHT = {
    "token-mean": () => `1 / ${data.minibatch_tokens} valid tokens of the mini-batch`,
    "seq-mean-token-mean": () => `1 / (${data.minibatch_seqs} sequences × ${data.seq_tokens} tokens of this sample)`,
    "seq-mean-token-sum": () => `1 / ${data.minibatch_seqs} sequences of the mini-batch`,
    "seq-mean-token-sum-norm": () => `1 / (${data.minibatch_seqs} sequences × ${data.max_len} max length)`,
  };

  function show(i) {
    const t = data.terms[i];
    body.replaceChildren();
    body.dataset.index = i;
    if (!t) { body.textContent = `Token ${i + 1} has no recorded log-prob.`; return; }
    const head = el("p", null);
    head.append(el("strong", null, `Token ${i + 1} of ${data.terms.length}: ${JSON.stringify(tokens[i])}`), " · ");
    const rule = el("span", "rule", t.rule ? data.rules[t.rule] : data.rules[""]);
    rule.dataset.rule = t.rule;
    rule.id = "explain-rule";
    head.appendChild(rule);
    const bounds = `[1 − ε_low, 1 + ε_high] = [${(1 - data.clip_low).toFixed(3)}, ${(1 + data.clip_high).toFixed(3)}]` +
      (data.clip_c ? `; dual clip c = ${data.clip_c}` : "; no dual clip");
    const rows = [
      ["old log-prob (log π_old)", num(t.old_logprob), "the policy that sampled, as the loss used it"],
      ["new log-prob (log π_θ)", num(t.new_logprob), "at the sample's first optimiser step"],
      ["ratio π_θ / π_old", num(t.ratio), `exp(${num(t.log_ratio)})`],
      ["clip bounds", bounds, ""],
      ["advantage A", num(data.advantage), "the sample's, on every token"],
      ["−A · ratio (pg1)", num(t.pg1), ""],
      ["−A · clip(ratio) (pg2)", num(t.pg2), t.clipped ? "pg2 > pg1: the clipped term is active" : ""],
      ["per-token loss L", num(t.loss), t.dual_clipped ? "the dual clip's constant −A · c" : "max(pg1, pg2)"],
      ["weight in the loss", num(t.weight, 6), data.in_loss ? `${data.mode}: ${WEIGHT[data.mode] ? WEIGHT[data.mode]() : ""}` : "masked: 0"],
      ["share of the mini-batch's loss", num(t.share, 6), "weight × L"],
      ["gradient on log π_θ", num(t.gradient, 6), "weight × ∂L/∂log π_θ"],
    ];
    const table = el("table", null);
    table.id = "explain-table";
    for (const [k, v, note] of rows) {
      const tr = el("tr");
      tr.append(el("th", null, k), el("td", "num", v), el("td", "muted small", note));
      table.appendChild(tr);
    }
    const push = el("p", null);
    push.id = "explain-push";
    if (t.gradient < 0) push.append(el("span", "push-up", "↑ pushed up"), ": gradient descent raises this token's log-prob (A > 0).");
    else if (t.gradient > 0) push.append(el("span", "push-down", "↓ pushed down"), ": gradient descent lowers this token's log-prob (A < 0).");
    else push.append(el("span", null, "No push: this token's gradient is 0."));
    body.append(head, table, push);
  }

  document.getElementById("tokens").addEventListener("token-select", (e) => show(e.detail.index));
  document.getElementById("token-explain").dataset.ready = "1"; // listening: a selection is explained
})();
