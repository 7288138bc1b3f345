"""Where the checkout is (tests run recipes and `python -m app.cli` from it)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
