"""JSON API (described by the OpenAPI schema) and websockets."""
