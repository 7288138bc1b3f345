"""One task of a multi-node trial, started by `srun` in the trial's batch script:
`python -m runners.executors.srun_task -- python -m runners.recipes.allreduce ...`.

Sets torch.distributed's env:// variables from SLURM's (runners.recipes._dist.rank_env_from_launcher)
and execs the recipe, which then runs as that rank (the same code as a rank started locally).
Standard library only: it runs on the compute nodes with the recipes' interpreter.
"""

from __future__ import annotations

import os
import sys

from runners.recipes._dist import rank_env_from_launcher


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m runners.executors.srun_task -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    env = rank_env_from_launcher(os.environ)
    if not env:
        print("srun_task: not started by srun (no SLURM_PROCID / SLURM_NTASKS)", file=sys.stderr)
        return 2
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        print(
            f"srun_task: {', '.join(missing)} not set (the batch script sets them from the allocation)", file=sys.stderr
        )
        return 2
    os.environ.update(env)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"srun_task: cannot start {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
