// The API page (/docs): Swagger UI over this server's OpenAPI schema (a file, not inline: CSP).
window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
