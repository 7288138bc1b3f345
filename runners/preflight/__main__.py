"""Run preflight alone on a node: `python -m runners.preflight [sglang_server recipe flags] [--skip CHECK]`.

Takes the sglang_server recipe's own flags (model path, TP size, --server-arg=..., sglang python);
exit 0 when every applicable check passed, 1 when one failed (its verdict proposal is printed).
"""

from __future__ import annotations

import sys

from runners.recipes import sglang_server


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return sglang_server.main(argv + ["--only-preflight=on"])


if __name__ == "__main__":
    sys.exit(main())
