// The memory plan beside the new-run form: the form's fields are posted to /runs/new/plan/ (400 ms after
// the last edit) and the per-GPU estimate comes back as JSON, with what the run asks for (CPUs, GPUs)
// against the cluster last seen. Text only, never HTML.
(() => {
  "use strict";

  const panel = document.getElementById("memory-plan");
  const form = document.getElementById("run-form");
  if (!panel || !form) return;
  const $ = (id) => document.getElementById(id);
  let timer = null;
  let latest = 0;

  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function renderResources(r) {
    const line = $("plan-resources");
    line.textContent = r ? `This run ${r.text}. ${r.note}` : "";
    line.classList.toggle("error", Boolean(r && r.shortfall.length));
  }

  function render(data) {
    renderResources(data.resources);
    const plan = data.plan;
    $("plan-table").hidden = !plan;
    if (!plan) {
      $("plan-summary").textContent = "";
      $("plan-note").textContent = data.reason ? `No plan: ${data.reason}` : "";
      return;
    }
    const rows = plan.terms.map((t) => {
      const tr = document.createElement("tr");
      const how = t.on_gpu ? t.detail : `${t.detail} (host memory, not counted)`;
      tr.append(cell(t.label), cell(t.gib.toFixed(2), "num"), cell(how));
      return tr;
    });
    const total = document.createElement("tr");
    total.className = plan.fits ? "plan-total" : "plan-total error";
    total.append(cell("total per GPU"), cell(plan.total_gib.toFixed(2), "num"), cell(`of ${plan.gpu_gib} GiB`));
    $("plan-body").replaceChildren(...rows, total);
    const millions = (plan.parameters / 1e6).toFixed(1);
    $("plan-summary").textContent =
      `${millions}M parameters · ${plan.strategy} × ${plan.learners} · ${plan.total_gib.toFixed(1)} GiB: ` +
      (plan.fits ? "fits" : "does not fit");
    const act = plan.activations_gib;
    const notes = [`Activations: ${act.without_checkpointing.toFixed(2)} GiB without gradient checkpointing, ` +
      `${act.with_checkpointing.toFixed(2)} with.`];
    if (plan.error) notes.push(data.checked ? `Launch refused: ${plan.error}` : plan.error);
    if (!data.checked) notes.push("A CPU run is not checked against the GPU memory.");
    $("plan-note").textContent = notes.join(" ");
  }

  async function update() {
    const mine = ++latest;
    try {
      const resp = await fetch(panel.dataset.url, { method: "POST", body: new FormData(form),
        headers: { Accept: "application/json" } });
      if (resp.ok && mine === latest) render(await resp.json());
    } catch (_) {
      // the next edit tries again
    }
  }

  const soon = () => { clearTimeout(timer); timer = setTimeout(update, 400); };
  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
  update();
})();
