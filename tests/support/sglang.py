"""The real SGLang release the contract tests run against (tests/contract/conftest.py installs it)."""

from __future__ import annotations

import os

SGLANG_VERSION = os.environ.get("SGLANG_VERSION", "0.5.23")  # SGLANG_VERSION picks another release to check
