// /docs: start Swagger UI (static/vendor/swagger-ui-bundle-*.js, loaded before this file) on the app's OpenAPI.
(function () {
  const root = document.getElementById("swagger-ui");
  if (!root || !window.SwaggerUIBundle) return;
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,  // the default validator is an outside service: no request leaves the board
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
})();
