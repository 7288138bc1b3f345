// /docs: start Swagger UI (static/vendor/swagger-ui-bundle-*.js, loaded before this file) on the app's OpenAPI.
// A logged-in browser's "Try it out" rides on its session cookie, so a write needs the session's CSRF token too:
// the page names the header and the token (data-csrf-header, data-csrf-token; app/security.py CSRF_HEADER) and
// every request to this server carries them. A Bearer token from Authorize needs none, and gets it harmlessly.
(function () {
  const root = document.getElementById("swagger-ui");
  if (!root || !window.SwaggerUIBundle) return;
  const csrfHeader = root.dataset.csrfHeader;
  const csrfToken = root.dataset.csrfToken;
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,  // the default validator is an outside service: no request leaves the board
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    requestInterceptor: function (request) {
      const target = new URL(request.url, window.location.href);
      if (csrfHeader && csrfToken && target.origin === window.location.origin) {
        request.headers[csrfHeader] = csrfToken;
      }
      return request;
    },
  });
})();
