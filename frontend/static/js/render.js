// How model text is drawn in the inspector: raw, markdown, or markdown with LaTeX (KaTeX), with <think>
// blocks folded and code fences highlighted on request. One menu per page; the choice is kept per user in
// localStorage. The vendored libraries are frontend/static/vendor: markdown-it, KaTeX, highlight.js,
// DOMPurify.
//
// Model output never runs as HTML, in any mode: markdown-it escapes raw HTML (html: false) and refuses
// javascript:/vbscript:/file:/data: links, images become text (nothing remote is fetched), KaTeX runs with
// trust off (no \href, \url, \includegraphics or \htmlXxx), and the whole result goes through DOMPurify,
// returned as a DOM fragment (never re-parsed), with every tag that loads or submits anything removed and
// every link kept only when it is http(s) or mailto. The raw mode sets text only.
(() => {
  "use strict";

  const MODES = [
    ["raw", "Raw", "the text exactly as generated"],
    ["markdown", "Markdown", "markdown rendered; raw HTML in the text is shown as text"],
    ["latex", "Markdown + LaTeX", "markdown, and math in $…$, $$…$$, \\(…\\), \\[…\\] drawn by KaTeX"],
  ];
  const DEFAULTS = { mode: "latex", think: true, code: true };
  const KEY = "dapo.render.v1:";

  // ---- settings ---------------------------------------------------------------------------------------

  function load(user) {
    try {
      const saved = JSON.parse(localStorage.getItem(KEY + user) || "null");
      if (!saved || typeof saved !== "object") return { ...DEFAULTS };
      return {
        mode: MODES.some(([m]) => m === saved.mode) ? saved.mode : DEFAULTS.mode,
        think: typeof saved.think === "boolean" ? saved.think : DEFAULTS.think,
        code: typeof saved.code === "boolean" ? saved.code : DEFAULTS.code,
      };
    } catch (err) {
      return { ...DEFAULTS }; // storage off or a hand-edited value: the defaults
    }
  }
  function save(user, opts) {
    try { localStorage.setItem(KEY + user, JSON.stringify(opts)); } catch (err) { /* private mode: not kept */ }
  }

  // ---- math: a markdown-it inline rule ahead of the backslash escapes ---------------------------------

  const DELIMS = [["$$", "$$", true], ["\\[", "\\]", true], ["\\(", "\\)", false], ["$", "$", false]];

  function mathRule(state, silent) {
    const src = state.src, pos = state.pos;
    for (const [open, close, display] of DELIMS) {
      if (!src.startsWith(open, pos)) continue;
      const from = pos + open.length;
      let end = src.indexOf(close, from);
      if (open === "$") {
        // $5 and $6 is money: the opening $ is followed by a non-space, the closing one preceded by a
        // non-space and not followed by a digit.
        if (/\s/.test(src[from] || " ")) return false;
        while (end > 0 && (/\s/.test(src[end - 1]) || /\d/.test(src[end + 1] || ""))) end = src.indexOf(close, end + 1);
      }
      if (end < 0 || end === from) return false;
      if (!silent) {
        const token = state.push("math", "", 0);
        token.content = src.slice(from, end);
        token.meta = { display };
      }
      state.pos = end + close.length;
      return true;
    }
    return false;
  }
  function renderMath(tex, display) {
    try {
      return window.katex.renderToString(tex, {
        displayMode: display, throwOnError: false, trust: false, strict: "ignore", maxExpand: 500, maxSize: 20,
        output: "html", // MathML's <semantics>/<annotation> are not in DOMPurify's allow-list
      });
    } catch (err) { // a parse error past throwOnError (too many expansions): the source as text
      return `<code class="math-error" title="${escape(String(err.message || err))}">${escape(tex)}</code>`;
    }
  }

  // ---- markdown ---------------------------------------------------------------------------------------

  const escape = (s) => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const parsers = new Map();

  function parser(math, code) {
    const key = `${math}/${code}`;
    if (parsers.has(key)) return parsers.get(key);
    const md = window.markdownit({
      html: false, linkify: false, typographer: false, breaks: true,
      highlight: code ? highlight : null,
    });
    // An image is a link's text: a model's ![x](https://host/p.png) never makes the browser fetch anything.
    md.renderer.rules.image = (tokens, i) => {
      const t = tokens[i];
      return `<span class="md-image">[image: ${escape(t.content || "")} ${escape(t.attrGet("src") || "")}]</span>`;
    };
    if (math) {
      md.inline.ruler.before("escape", "math", mathRule);
      md.renderer.rules.math = (tokens, i) => renderMath(tokens[i].content, tokens[i].meta.display);
    }
    parsers.set(key, md);
    return md;
  }
  function highlight(source, lang) {
    const hljs = window.hljs;
    try {
      if (lang && hljs.getLanguage(lang)) return hljs.highlight(source, { language: lang, ignoreIllegals: true }).value;
      if (source.length < 20000) return hljs.highlightAuto(source).value;
    } catch (err) { /* drawn plain below */ }
    return escape(source);
  }

  // ---- <think> blocks -----------------------------------------------------------------------------------

  // [{think: bool, text, open: bool (no closing tag)}]. A closing tag with no opening one before it (chat
  // templates that put <think> in the prompt) makes everything before it thinking.
  function segments(text) {
    const out = [];
    const re = /<(\/?)think>/gi;
    let at = 0, inside = false, m;
    while ((m = re.exec(text)) !== null) {
      const closing = m[1] === "/";
      if (!inside && !closing) {
        if (m.index > at) out.push({ think: false, text: text.slice(at, m.index) });
        inside = true;
      } else if (closing) {
        out.push({ think: true, text: text.slice(at, m.index), open: false });
        inside = false;
      } else {
        continue; // a nested <think>: part of the thinking
      }
      at = re.lastIndex;
    }
    if (at < text.length || inside) out.push(inside ? { think: true, text: text.slice(at), open: true } : { think: false, text: text.slice(at) });
    return out;
  }

  // ---- sanitising ----------------------------------------------------------------------------------------

  const FORBID_TAGS = ["script", "style", "img", "image", "iframe", "frame", "object", "embed", "form", "input",
    "button", "textarea", "select", "option", "link", "meta", "base", "video", "audio", "source", "track",
    "picture", "use", "foreignObject", "animate", "set", "template", "dialog", "portal"];
  const FORBID_ATTR = ["src", "srcset", "action", "formaction", "xlink:href", "background", "poster", "ping",
    "target", "id", "name"];
  const SAFE_URL = /^(?:https?:|mailto:)/i;
  let hooked = false;

  function sanitise(html) {
    const purify = window.DOMPurify;
    if (!hooked) {
      purify.addHook("afterSanitizeAttributes", (node) => {
        if (node.hasAttribute && node.hasAttribute("href")) {
          const href = node.getAttribute("href").trim();
          if (node.tagName !== "A" || !SAFE_URL.test(href)) node.removeAttribute("href");
          else node.setAttribute("rel", "noopener noreferrer nofollow");
        }
      });
      hooked = true;
    }
    return purify.sanitize(html, {
      RETURN_DOM_FRAGMENT: true, FORBID_TAGS, FORBID_ATTR, ALLOW_DATA_ATTR: false, ALLOW_UNKNOWN_PROTOCOLS: false,
    });
  }

  // ---- rendering --------------------------------------------------------------------------------------

  function html(text, opts) {
    const md = parser(opts.mode === "latex", opts.code);
    const parts = segments(String(text));
    return parts.map((p) => {
      if (!p.think) return md.render(p.text);
      const label = `thinking · ${p.text.length.toLocaleString()} character${p.text.length === 1 ? "" : "s"}${p.open ? " (no closing tag)" : ""}`;
      return `<details class="think"${opts.think ? "" : " open"}><summary>${escape(label)}</summary>` +
        `<div class="think-body">${md.render(p.text)}</div></details>`;
    }).join("");
  }

  // Draw `text` into `node` in `opts`' mode: text only for raw, a sanitised fragment otherwise.
  function into(node, text, opts) {
    node.classList.toggle("rendered", opts.mode !== "raw");
    if (opts.mode === "raw") { node.textContent = String(text); return; }
    node.replaceChildren(sanitise(html(text, opts)));
  }

  // The menu: a segmented choice of mode and two switches, in `container`; onChange(opts) after a change.
  function menu(container, user, onChange) {
    let opts = load(user);
    container.classList.add("render-menu");
    container.setAttribute("role", "group");
    container.setAttribute("aria-label", "Render model text as");
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = "Render";
    container.appendChild(label);
    const buttons = MODES.map(([mode, text, tip]) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "btn seg";
      b.dataset.mode = mode;
      b.id = `render-${mode}`;
      b.textContent = text;
      b.title = tip;
      b.addEventListener("click", () => set({ mode }));
      container.appendChild(b);
      return b;
    });
    const toggles = [["think", "fold <think>"], ["code", "highlight code"]].map(([name, text]) => {
      const wrap = document.createElement("label");
      wrap.className = "small";
      const box = document.createElement("input");
      box.type = "checkbox";
      box.id = `render-${name}`;
      box.addEventListener("change", () => set({ [name]: box.checked }));
      wrap.append(box, ` ${text}`);
      container.appendChild(wrap);
      return [name, box];
    });
    function show() {
      for (const b of buttons) {
        b.classList.toggle("active", b.dataset.mode === opts.mode);
        b.setAttribute("aria-pressed", String(b.dataset.mode === opts.mode));
      }
      for (const [name, box] of toggles) { box.checked = opts[name]; box.disabled = opts.mode === "raw"; }
    }
    function set(change) {
      opts = { ...opts, ...change };
      save(user, opts);
      show();
      onChange(opts);
    }
    show();
    return opts;
  }

  window.dapoRender = { MODES, DEFAULTS, load, save, html, into, menu, segments, sanitise };
})();
