"""The server settles its heap once it is set up (app/services/lifespan.py `settle_heap`): what it set up is
frozen out of the collector's passes, and young objects are collected every GC_YOUNG allocations, not
Python's 700 (docs/performance.md: 20-37 ms of a full-size replay report went to the collector)."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from app.services.lifespan import GC_YOUNG


def test_a_started_server_freezes_what_it_set_up_and_collects_young_objects_less_often(app):
    before = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_threshold() == (GC_YOUNG, 10, 10)
            assert gc.get_freeze_count() > 10_000  # modules, routes, the engine
    finally:
        gc.set_threshold(*before)
