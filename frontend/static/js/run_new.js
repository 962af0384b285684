// The new-run form: the preset menu fills every field with the preset's values; the catalog pickers
// set the model and data paths. The server validates everything again (dapo.config) on submit.
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
  presetSelect.addEventListener("change", () => {
    const p = presets[presetSelect.value];
    if (!p) return;
    for (const [name, value] of Object.entries(p.values)) setField(name, value);
    form.querySelectorAll(".field.has-error").forEach((f) => f.classList.remove("has-error"));
    showHelp();
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
