"""`GET /api/campaigns/{slug}/export?with_results=true` over the committed H200 results campaign: imported
through the API, its trials come back as measurements (same metrics, samples, fingerprint) and the export
with results is the committed file, byte for byte."""

from __future__ import annotations

import pytest
import yaml

from app.domain.units import plural
from tests.support.paths import ROOT

pytestmark = pytest.mark.both_databases  # import/export round trip of a results campaign

RESULTS = ROOT / "docs" / "results" / "speculation-sweep-h200x1.yaml"
SLUG = "speculation-sweep-h200x1"


def test_a_results_campaign_travels_through_the_api(client, api_headers):
    client.headers.update(api_headers)
    text = RESULTS.read_text()
    r = client.post("/api/campaigns/import", content=text, headers={"Content-Type": "application/x-yaml"})
    assert r.status_code == 200, r.text
    doc = yaml.safe_load(text)
    metrics = sum(len(t["metrics"]) for t in doc["results"])
    assert (
        f"results: {plural(len(doc['results']), 'trial')} with {plural(metrics, 'metric')} added" in r.json()["summary"]
    )
    assert client.get(f"/api/campaigns/{SLUG}/export?with_results=true").text == text
    plain = client.get(f"/api/campaigns/{SLUG}/export").text
    assert "\nresults:" not in plain and plain == text.split("results:\n")[0]
    # The trials are on the board as measured ones: the API lists them with their stack.
    rows = client.get(f"/api/trials?campaign={SLUG}").json()["items"]
    assert sorted((t["approach"], t["state"], t["phase"]) for t in rows) == sorted(
        (t["approach"], t["state"], "imported") for t in doc["results"]
    )
    trial = client.get(f"/api/trials/{rows[-1]['id']}").json()  # the oldest: the decode step
    assert trial["fingerprint"] == doc["results"][0]["fingerprint"]
    assert trial["fingerprint"]["gpus"][0]["name"] == "NVIDIA H200"
    assert client.get("/api/campaigns/nope/export?with_results=true").status_code == 404


def test_the_imported_results_campaign_draws_its_pages(operator_client):
    text = RESULTS.read_text()
    r = operator_client.post("/api/campaigns/import", content=text, headers={"Content-Type": "application/x-yaml"})
    assert r.status_code == 200, r.text
    for path in (f"/campaigns/{SLUG}", f"/campaigns/{SLUG}/charts", f"/campaigns/{SLUG}/trials"):
        page = operator_client.get(path)
        assert page.status_code == 200, (path, page.text[:500])
    trials = operator_client.get(f"/campaigns/{SLUG}/trials").text
    assert "Verify step compute, 1 GPU, in a CUDA graph" in trials and "imported" in trials
