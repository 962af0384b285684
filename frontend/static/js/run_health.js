// The health panel's judgement: what each tile means (its tooltip), and warnings when the numbers say the
// run is in trouble. Pure functions over the run's series; run_detail.js draws the results.
(() => {
  "use strict";
  const TIPS = {
    "Train acc": "Share of this step's sampled responses that were correct (train/acc/mean).",
    "Reward": "Mean reward of this step's responses, overlong penalty included (critic/score/mean).",
    "Val acc": "Held-out accuracy: mean over k samples per test problem (val/acc/mean@k).",
    "Entropy": "Mean token entropy of the policy's responses (actor/entropy). A fall towards 0 means the policy is collapsing onto few answers.",
    "Resp. length": "Mean response length in tokens (response_length/mean).",
    "Clip ratio": "Share of responses cut at rollout.max_response_length (response_length/clip_ratio).",
    "pg_clipfrac": "Share of tokens whose ratio was clipped at 1+ε_high (actor/pg_clipfrac).",
    "pg_clipfrac_lower": "Share of tokens clipped by the dual clip on negative advantages (actor/pg_clipfrac_lower).",
    "Kept / generated": "Prompt groups trained on / generated this step: groups all-correct or all-wrong carry no signal and are dropped by dynamic sampling; surplus groups passed the filter after the batch was full and are not trained on (shown apart).",
    "All-correct / all-wrong": "Share of prompt groups whose samples were all correct / all wrong (no gradient signal).",
  };
  const COLLAPSE = 0.1; // entropy below a tenth of its first value
  const LENGTH_LIMIT = 0.2; // a fifth of the responses cut at the length limit

  // series(name) -> {steps, values} or undefined
  function warnings(series) {
    const out = [];
    const last = (name) => { const s = series(name); return s && s.values.length ? s.values[s.values.length - 1] : null; };
    const entropy = series("actor/entropy");
    if (entropy && entropy.values.length > 1) {
      const first = entropy.values.find((v) => v !== null), now = last("actor/entropy");
      if (first > 0 && now !== null && now < COLLAPSE * first)
        out.push(`Entropy collapse: actor/entropy is ${now.toPrecision(3)}, down from ${first.toPrecision(3)} at step ${entropy.steps[0]}. ` +
          "The policy is settling on few answers and will stop exploring; a higher algorithm.clip_high (clip-higher) counters this.");
    }
    const kept = last("train/num_prompts_kept");
    if (kept === 0)
      out.push("Every prompt group was filtered at the last step: all were all-correct or all-wrong, so dynamic sampling had nothing to train on.");
    const clipped = last("response_length/clip_ratio");
    if (clipped !== null && clipped >= LENGTH_LIMIT)
      out.push(`${Math.round(100 * clipped)}% of the responses hit the generation limit (rollout.max_response_length): ` +
        "they are cut mid-answer and penalised as overlong; raise the limit if the answers need the room.");
    return out;
  }
  // The ETA between two step events: it counts down towards the next step's estimate but not past it, so
  // a step that takes longer than usual (a stall) does not run the ETA to 0 and then make it jump back.
  function eta(state, secondsSinceUpdate) {
    if (state.status !== "running" || state.eta_s === null || state.eta_s === undefined) return { eta: null, slow: false };
    const remaining = Math.max(1, state.total_steps - state.step);
    const pace = state.eta_s / remaining;
    const floor = state.eta_s - pace;
    return { eta: Math.max(floor, state.eta_s - secondsSinceUpdate), slow: secondsSinceUpdate > 2 * pace + 5 };
  }
  window.dapoHealth = { TIPS, warnings, eta };
})();
