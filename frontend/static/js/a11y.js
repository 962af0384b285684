// Every page: keep each chart's toolbar (plotly draws ~11 buttons per chart) out of the keyboard's tab
// order, so Tab goes from content to content; the toolbar still works with the mouse. The charts' data is
// reachable from the keyboard as CSV (Metrics CSV, the comparison's CSV).
(() => {
  "use strict";
  function untab(root) {
    for (const b of root.querySelectorAll(".modebar-btn:not([tabindex])")) b.setAttribute("tabindex", "-1");
  }
  new MutationObserver((changes) => {
    for (const c of changes) for (const n of c.addedNodes) if (n.nodeType === 1) untab(n.parentElement || n);
  }).observe(document.documentElement, { childList: true, subtree: true });
  untab(document);
})();
