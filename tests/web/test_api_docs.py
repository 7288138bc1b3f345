"""/docs: Swagger UI from local, pinned assets (no CDN, no inline script) and a Bearer scheme in OpenAPI."""

import re

from app.templating import SWAGGER_UI_VERSION, asset_url


def test_docs_page_uses_only_local_assets(client, api_headers):
    r = client.get("/docs")
    assert r.status_code == 200
    sources = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', r.text)
    assert asset_url(f"vendor/swagger-ui-bundle-{SWAGGER_UI_VERSION}.js") in sources
    assert asset_url(f"vendor/swagger-ui-{SWAGGER_UI_VERSION}.css") in sources and asset_url("docs.js") in sources
    assert all(s.startswith(("/", "data:")) for s in sources), sources
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", r.text)  # every script is a file
    for path in (asset_url(f"vendor/swagger-ui-bundle-{SWAGGER_UI_VERSION}.js"), asset_url("docs.js")):
        assert client.get(path).status_code == 200
    assert client.get("/redoc", headers=api_headers).status_code == 404  # the CDN-only ReDoc page is gone


def test_openapi_declares_bearer_on_operator_routes(client, api_headers):
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["APIToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["APIToken"]["description"],
    }
    assert spec["paths"]["/api/campaigns/{slug}/run-next"]["post"]["security"] == [{"APIToken": []}]
    assert client.get("/api/campaigns").status_code == 401
    assert client.get("/api/campaigns", headers=api_headers).status_code == 200
