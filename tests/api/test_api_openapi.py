"""The new routes as /openapi.json describes them: response models (not bare objects), the error shape the
server really sends, the log as text/plain, the Bearer scheme; the schema itself is driven against a live
server by tests/security/test_api_schema.py (schemathesis)."""

from __future__ import annotations

ROUTES = {
    ("/api/trials", "get"): "TrialPage",
    ("/api/trials/{trial_id}", "get"): "TrialPublic",
    ("/api/runners/{runner_id}", "get"): "RunnerPublic",
    ("/api/campaigns/{slug}/share-links/{link_id}/revoke", "post"): "ShareLinkPublic",
    ("/api/campaigns/{slug}/compare", "get"): "ComparisonPublic",
    ("/api/campaigns/{slug}/run-next", "post"): "RunResultPublic",
    ("/api/campaigns/{slug}/approaches/{key}/run", "post"): "RunResultPublic",
    ("/api/campaigns/{slug}/answer", "get"): "AnswerPublic",
    ("/api/campaigns/{slug}/answer/config", "get"): "EngineConfigPublic",
    ("/api/campaigns/{slug}/answer/engine-check", "get"): "EngineCheckPublic",
    ("/api/campaigns/{slug}/run-order", "put"): "RunOrderPublic",
    ("/api/campaigns/{slug}/rename", "post"): "CampaignPublic",
    ("/api/campaigns/{slug}/archive", "post"): "CampaignPublic",
    ("/api/campaigns/{slug}/restore", "post"): "CampaignPublic",
    ("/api/campaigns/{slug}", "delete"): "CampaignDeleted",
}


def test_new_routes_declare_their_models_and_errors(client):
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    for (path, method), model in ROUTES.items():
        op = paths[path][method]
        ok = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{model}"}, (path, ok)
        for code in ("401", "404", "422"):
            assert op["responses"][code]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"
            }
        assert {"APIToken": []} in op.get("security", []), path
    created = paths["/api/campaigns/{slug}/share-links"]["post"]["responses"]
    assert created["201"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ShareLinkPublic"}
    assert paths["/api/runners"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["items"] == {
        "$ref": "#/components/schemas/RunnerPublic"
    }
    assert paths["/api/campaigns/{slug}/queue"]["get"]["responses"]["200"]["content"]["application/json"]["schema"][
        "items"
    ] == {"$ref": "#/components/schemas/QueuedTrialPublic"}
    assert paths["/api/campaigns/{slug}/ranking"]["get"]["responses"]["200"]["content"]["application/json"]["schema"][
        "items"
    ] == {"$ref": "#/components/schemas/RankedPublic"}
    assert "text/plain" in paths["/api/trials/{trial_id}/log"]["get"]["responses"]["200"]["content"]
    params = {p["name"]: p for p in paths["/api/trials"]["get"]["parameters"]}
    filters = {"campaign", "approach", "state", "runner", "proposal", "tag", "since", "until", "requested_by"}
    assert set(params) == filters | {"sort", "page", "before", "limit"}
    export = {p["name"] for p in paths["/api/trials/export"]["get"]["parameters"]}
    assert export == filters | {"sort", "format"}
    assert set(paths["/api/trials/export"]["get"]["responses"]["200"]["content"]) == {"text/csv", "application/json"}
    assert params["limit"]["schema"]["maximum"] == 200 and params["limit"]["schema"]["minimum"] == 1
    states = doc["components"]["schemas"]["TrialState"]["enum"]
    assert "succeeded" in states and "lost" in states
    # Pages are not API operations.
    assert not any(p.startswith("/campaigns/{slug}/compare") for p in paths)
