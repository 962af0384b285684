// What every plotly chart of the site shares: the palette and the layout, read from the CSS variables of
// app.css (so charts follow the light and dark themes), and small number formatters.
(() => {
  "use strict";
  const css = () => getComputedStyle(document.documentElement);
  const read = (name, fallback) => css().getPropertyValue(name).trim() || fallback;

  // The series colours, --series-1 … --series-10 in app.css.
  function palette() {
    const out = [];
    for (let i = 1; i <= 10; i++) out.push(read(`--series-${i}`, "#2563eb"));
    return out;
  }
  function color(i) { const p = palette(); return p[((i % p.length) + p.length) % p.length]; }

  // The base layout; `extra` is merged one level deep (xaxis, yaxis, font, margin are merged, not replaced).
  function layout(extra) {
    const grid = read("--chart-grid", "#eef2f7");
    const base = {
      font: { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 11, color: read("--chart-ink", "#334155") },
      xaxis: { gridcolor: grid, zeroline: false },
      yaxis: { gridcolor: grid, zeroline: false },
      paper_bgcolor: read("--card", "#fff"),
      plot_bgcolor: read("--card", "#fff"),
    };
    for (const [key, value] of Object.entries(extra || {})) {
      base[key] = value && typeof value === "object" && !Array.isArray(value) && base[key]
        ? { ...base[key], ...value } : value;
    }
    return base;
  }
  function muted() { return read("--muted", "#556274"); }

  // Formatters: "–" for a missing value.
  function fixed(v, digits) {
    if (v === null || v === undefined) return "–";
    return Math.abs(v) >= 1000 ? Number(v).toFixed(0) : Number(v).toFixed(digits);
  }
  function pct(v) { return v === null || v === undefined ? "–" : `${Math.round(100 * v)}%`; }
  function duration(s) {
    if (s === null || s === undefined) return "–";
    s = Math.max(0, Math.round(s));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return h ? `${h}h ${m}m` : m ? `${m}m ${sec}s` : `${sec}s`;
  }

  window.dapoCharts = { palette, color, layout, muted, fixed, pct, duration };
})();
