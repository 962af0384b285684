// The sample page's render menu (render.js): the prompt and the response drawn raw (the server's text, the
// extracted answer marked) or rendered; the choice is the user's, kept in localStorage.
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const menuBox = $("render-menu");
  if (!menuBox) return;
  const pairs = [[$("prompt"), $("prompt-rendered")], [$("response"), $("response-rendered")]];
  const texts = pairs.map(([raw]) => raw.textContent);

  function draw(opts) {
    pairs.forEach(([raw, rendered], i) => {
      const isRaw = opts.mode === "raw";
      raw.hidden = !isRaw;
      rendered.hidden = isRaw;
      if (!isRaw) window.dapoRender.into(rendered, texts[i], opts);
      else rendered.replaceChildren();
    });
    document.body.dataset.renderMode = opts.mode;
  }
  draw(window.dapoRender.menu(menuBox, menuBox.dataset.user || "", draw));
})();
