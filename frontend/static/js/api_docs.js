// /api/docs/: the interactive explorer (Swagger UI, vendored in static/vendor) over /api/schema/, built the
// first time its panel is opened. Requests go with this page's session; unsafe methods carry the CSRF token.
(function () {
  "use strict";
  const panel = document.getElementById("api-explorer");
  const target = document.getElementById("swagger-ui");
  if (!panel || !target) return;
  const token = document.querySelector("#swagger-csrf input[name=csrfmiddlewaretoken]");
  let built = false;

  function build() {
    if (built || typeof window.SwaggerUIBundle !== "function") return;
    built = true;
    window.SwaggerUIBundle({
      url: target.dataset.schema,
      domNode: target,
      deepLinking: false,
      validatorUrl: null, // never ask an outside validator about our schema
      displayRequestDuration: true,
      defaultModelsExpandDepth: 0,
      requestInterceptor: (request) => {
        request.credentials = "same-origin";
        if (token && !/^(GET|HEAD|OPTIONS)$/i.test(request.method || "GET")) {
          request.headers["X-CSRFToken"] = token.value;
        }
        return request;
      },
    });
  }

  panel.addEventListener("toggle", () => { if (panel.open) build(); });
  if (panel.open) window.addEventListener("load", build);
})();
