"""`python -m app.cli`: the `campaign` command."""

from app.cli import main

main()
