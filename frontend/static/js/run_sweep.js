// The new-run form's sweep panel: rows of fields to vary (a list of values, or for a random sweep a
// range), the number of runs counted as you type and held against the cap, and the confirmation the server
// shows before it queues them. The server parses and validates everything again (sweeps.plan).
(() => {
  "use strict";
  const panel = document.getElementById("sweep-panel");
  if (!panel) return; // a fork's form has no sweep
  const $ = (id) => document.getElementById(id);
  const limits = JSON.parse($("sweep-limits").textContent);
  const rows = $("sweep-rows");
  const mode = $("sweep-mode");

  const split = (text) => text.split(/[,\n]/).map((p) => p.trim()).filter((p) => p);
  const intOf = (text) => (/^\s*\d+\s*$/.test(text) ? Number(text) : NaN);

  function placeholder(row) {
    const opt = row.querySelector(".sweep-field").selectedOptions[0];
    const type = opt ? opt.dataset.type : "";
    const hint = { bool: "true, false", int: "8, 16, 32", float: "1e-5, 2e-5, 4e-5", str: "a, b" }[type];
    const values = row.querySelector(".sweep-values");
    values.placeholder = opt && opt.dataset.choices ? opt.dataset.choices : hint ? `values, comma-separated: ${hint}` : "values, comma-separated";
    const numeric = type === "int" || type === "float";
    const kind = row.querySelector(".sweep-kind");
    if (!numeric && kind.value === "range") kind.value = "list"; // a range needs a number field
    kind.querySelector("option[value=range]").disabled = !numeric;
  }
  function layout() {
    const random = mode.value === "random";
    panel.querySelectorAll(".sweep-random-only").forEach((el) => { el.hidden = !random; });
    for (const row of rows.children) {
      const range = random && row.querySelector(".sweep-kind").value === "range";
      row.querySelector(".sweep-values").hidden = range;
      row.querySelector(".sweep-range").hidden = !range;
      row.querySelector(".sweep-remove").hidden = rows.children.length < 2;
    }
  }
  // The count before launch: a grid's product of its lists, or a random sweep's runs, against the cap.
  function count() {
    const out = $("sweep-count");
    const used = [...rows.children].filter((r) => r.querySelector(".sweep-field").value);
    const cap = intOf($("sweep-cap").value);
    if (!used.length) { out.textContent = "Choose a field to vary."; out.className = "sweep-count"; return; }
    let n, how;
    if (mode.value === "random") {
      n = intOf($("sweep-runs").value);
      how = `${used.length} field${used.length === 1 ? "" : "s"}, drawn`;
    } else {
      const sizes = used.map((r) => split(r.querySelector(".sweep-values").value).length);
      n = sizes.reduce((a, b) => a * b, 1);
      how = sizes.join(" × ");
    }
    if (!Number.isFinite(n)) { out.textContent = "Runs to draw: give a whole number."; out.className = "sweep-count over"; return; }
    const over = Number.isFinite(cap) ? n > cap : n > limits.max_runs;
    const limit = Number.isFinite(cap) ? `the cap of ${cap}` : `${limits.max_runs}`;
    out.textContent = `${n} run${n === 1 ? "" : "s"} (${how})` +
      (over ? `: more than ${limit}, so the sweep would be refused.` : `, within ${limit}.`);
    out.className = over ? "sweep-count over" : "sweep-count";
  }
  function renumber() {
    [...rows.children].forEach((row, i) => {
      row.querySelectorAll("[aria-label]").forEach((el) => {
        el.setAttribute("aria-label", el.getAttribute("aria-label").replace(/\(\d+\)$/, `(${i + 1})`));
      });
    });
  }
  function update() { layout(); count(); }

  $("sweep-add").addEventListener("click", () => {
    if (rows.children.length >= limits.max_fields) return;
    const row = rows.lastElementChild.cloneNode(true);
    row.querySelectorAll("input").forEach((el) => { el.value = ""; });
    row.querySelector(".sweep-field").value = "";
    row.querySelector(".sweep-kind").value = "list";
    row.querySelector(".sweep-scale").value = "log";
    rows.appendChild(row);
    renumber(); placeholder(row); update();
    row.querySelector(".sweep-field").focus();
    $("sweep-add").disabled = rows.children.length >= limits.max_fields;
  });
  rows.addEventListener("click", (e) => {
    if (!e.target.classList.contains("sweep-remove") || rows.children.length < 2) return;
    e.target.closest(".sweep-row").remove();
    renumber(); update();
    $("sweep-add").disabled = false;
    $("sweep-add").focus();
  });
  rows.addEventListener("change", (e) => {
    if (e.target.classList.contains("sweep-field")) placeholder(e.target.closest(".sweep-row"));
    update();
  });
  panel.addEventListener("input", count);
  // Enter in the panel asks for the sweep (which lists its runs first), never the single run's Launch
  panel.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" || e.target.tagName !== "INPUT") return;
    e.preventDefault();
    $("launch-sweep").click();
  });
  mode.addEventListener("change", update);

  // What the confirmation lists is what was posted: an edit after it withdraws it (post again to see).
  const confirm = $("sweep-confirm");
  if (confirm) {
    const form = $("run-form");
    const withdraw = () => { confirm.remove(); form.removeEventListener("input", withdraw); form.removeEventListener("change", withdraw); };
    form.addEventListener("input", withdraw);
    form.addEventListener("change", withdraw);
    $("sweep-cancel").addEventListener("click", (e) => { e.preventDefault(); withdraw(); $("launch-sweep").focus(); });
    $("sweep-confirm-btn").focus();
    confirm.scrollIntoView({ block: "center" });
  }
  $("run-form").addEventListener("submit", () => { $("launch-sweep").disabled = true; });
  for (const row of rows.children) placeholder(row);
  update();
})();
