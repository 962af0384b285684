// "Export model" on a run's page: while an export is queued or running, poll the run's export API
// every 2 s and update its row (state, then the folder written or the error). Text only, never HTML.
(() => {
  "use strict";

  // the step the form exports, said beside the name field (and in its placeholder, the default name)
  const step = document.getElementById("export-step"), name = document.getElementById("export-name");
  if (step && name) {
    step.addEventListener("change", () => {
      name.placeholder = `${name.dataset.runName} step ${step.value}`;
      const which = document.getElementById("export-which");
      which.replaceChildren("exports step ", Object.assign(document.createElement("strong"), { textContent: step.value }),
        step.selectedIndex === 0 && step.options.length > 1 ? ", the newest" : "");
    });
  }

  const table = document.getElementById("exports-table");
  if (!table) return;
  const PENDING = ["queued", "running"];
  const pending = () => [...table.querySelectorAll("tr[data-export]")].some((r) => PENDING.includes(r.dataset.status));

  function show(row, e) {
    row.dataset.status = e.status;
    const badge = row.querySelector(".export-status");
    badge.textContent = e.status;
    badge.dataset.status = e.status;
    const cell = row.querySelector(".export-detail");
    cell.replaceChildren();
    const el = document.createElement(e.error ? "span" : "code");
    if (e.error) el.className = "error";
    el.textContent = e.error || e.path;
    cell.append(el);
  }

  async function poll() {
    try {
      const resp = await fetch(table.dataset.api, { headers: { Accept: "application/json" } });
      if (resp.ok) {
        for (const e of (await resp.json()).exports) {
          const row = table.querySelector(`tr[data-export="${e.id}"]`);
          if (row) show(row, e);
        }
      }
    } catch (_) {
      // the next poll tries again
    }
    if (pending()) setTimeout(poll, 2000);
  }

  if (pending()) setTimeout(poll, 2000);
})();
