// The new-run form: the preset menu fills every field with the preset's values; the catalog pickers
// set the model and data paths. The server validates everything again (dapo.runconfig) on submit.
(() => {
  "use strict";
  const presets = JSON.parse(document.getElementById("presets-data").textContent);
  const form = document.getElementById("run-form");
  const presetSelect = document.getElementById("f-preset");
  const help = document.getElementById("preset-help");

  function setField(name, value) {
    const el = form.elements.namedItem(name);
    if (!el) return;
    if (el.type === "checkbox") el.checked = value === true;
    else el.value = value;
  }
  function showHelp() {
    const p = presets[presetSelect.value];
    help.textContent = p ? p.description : "";
  }
  function fieldValue(name) {
    const el = form.elements.namedItem(name);
    if (!el) return undefined;
    return el.type === "checkbox" ? el.checked : el.value;
  }
  // Picking a preset replaces every field. What it overwrote (a clone's settings, the user's edits) is
  // listed beside the menu with an Undo, so a change of the menu never silently loses a value.
  const notice = document.getElementById("preset-notice");
  let undo = null;
  let previousPreset = presetSelect.value;
  presetSelect.addEventListener("change", () => {
    const p = presets[presetSelect.value];
    if (!p) return;
    const before = {};
    for (const name of Object.keys(p.values)) before[name] = fieldValue(name);
    for (const [name, value] of Object.entries(p.values)) setField(name, value);
    const changed = Object.keys(p.values).filter((n) => before[n] !== undefined && before[n] !== fieldValue(n));
    const from = previousPreset;
    undo = () => {
      for (const [name, value] of Object.entries(before)) if (value !== undefined) setField(name, value);
      presetSelect.value = from;
      previousPreset = from;
      showHelp();
    };
    previousPreset = presetSelect.value;
    form.querySelectorAll(".field.has-error").forEach((f) => f.classList.remove("has-error"));
    showHelp();
    if (changed.length) {
      const shown = changed.slice(0, 4).map((n) => `${n} ${before[n]} → ${fieldValue(n)}`).join(", ");
      const more = changed.length > 4 ? ` and ${changed.length - 4} more` : "";
      document.getElementById("preset-notice-text").textContent =
        `The preset ${presetSelect.value} replaced ${changed.length} setting${changed.length === 1 ? "" : "s"}: ${shown}${more}.`;
      notice.hidden = false;
    } else notice.hidden = true;
  });
  document.getElementById("preset-undo").addEventListener("click", () => {
    if (undo) undo();
    undo = null;
    notice.hidden = true;
    presetSelect.focus();
  });
  document.getElementById("f-base-model").addEventListener("change", (e) => {
    const opt = e.target.selectedOptions[0];
    if (opt && opt.dataset.path) setField("model.path", opt.dataset.path);
  });
  document.getElementById("f-dataset").addEventListener("change", (e) => {
    const opt = e.target.selectedOptions[0];
    if (opt && opt.dataset.train) {
      setField("data.train_path", opt.dataset.train);
      setField("data.val_path", opt.dataset.val || "");
    }
  });
  // Several catalog datasets as further validation sets: their files (validation split, else the only
  // one) go to data.val_paths, each reported under its own name.
  document.getElementById("f-val-datasets").addEventListener("change", (e) => {
    setField("data.val_paths", [...e.target.selectedOptions].map((o) => o.dataset.file).join(", "));
  });
  form.addEventListener("submit", () => {
    document.getElementById("launch").disabled = true;
    const ladder = document.getElementById("launch-ladder"); // the ablation ladder posts this form too
    if (ladder) ladder.disabled = true;
  });
  showHelp();
  const firstError = form.querySelector(".has-error input, .has-error select");
  if (firstError) firstError.focus();
  const confirmLadder = document.getElementById("ladder-confirm-btn"); // the ladder asks once more
  if (confirmLadder) {
    confirmLadder.focus();
    document.getElementById("ladder-cancel").addEventListener("click", (e) => {
      e.preventDefault();
      document.getElementById("ladder-confirm").remove();
      document.getElementById("launch").focus();
    });
  }
})();
