"""Debian's Chromium for Playwright (Playwright cannot download its own browser here)."""

import os

CHROMIUM = os.environ.get("CAMPAIGN_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
