"""Helpers shared by the tests, imported as `tests.support.<module>` (the checkout root is on sys.path):

- `paths`: the checkout root.       - `net`: `free_port`.
- `databases`: migrated template databases (SQLite file, PostgreSQL `CREATE DATABASE ... TEMPLATE`).
- `servers`: `campaign serve` in its own process (`LiveServer`) and uvicorn in a thread (`ThreadServer`).
- `browser`: Chromium for Playwright.
- `trials`, `recipes`, `verdicts`, `charts`: seeded campaigns, a protocol-speaking runner stand-in,
  recipe subprocesses, verdict scenarios, the charts fixture campaign.
- `results`: the committed results campaigns of docs/results/, imported.   - `auth`: tokens and logged-in clients.
"""
