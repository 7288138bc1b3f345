"""Campaign Board: the server that holds an optimization campaign and its trials."""
from pathlib import Path

__version__ = "0.1.0"

# templates/, static/ and alembic/ live at the top of the checkout, beside app/.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
