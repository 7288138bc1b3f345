"""The change-point pass (app/domain/changes.py) over a campaign of issue 24's size: 500 approaches / 50,000
trials / ~519,000 metrics (bench/pages_at_scale.py's build_campaign). Prints the first full pass (every
(approach, runner) pair is new), then the CPU of the pass per new trial: --new times, one succeeded trial with
its approach's last metrics (some 6% slower) is added, then one pass runs (this process's CPU, and the
statements it ran).

    .venv/bin/python bench/change_points.py                 # full size, SQLite
    .venv/bin/python bench/change_points.py --scale 0.1 --db postgres
    .venv/bin/python bench/change_points.py --detection     # what detection reaches (docs/statistics.md)

--detection measures `changes.detect` on series with one value per trial: planted 5% shifts at 3% noise
(for each design m in --sides, default 20 30 50: 3 m points, the shift at a random position with at least m
on each side; found = a change point within two points of it), flat series at 3% noise (false change points per 1,000 points), and, for reference,
oracles that know there is exactly one shift (its maximum-likelihood location; the board's locator) and
the ceiling of the design: the Bayes locator that knows everything but the position.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import event, insert, select  # noqa: E402
from sqlmodel import Session, col  # noqa: E402

from app.models import Metric, Trial, TrialState, utcnow  # noqa: E402


def add_trial(engine, rng: random.Random, slower: float) -> None:
    """One succeeded trial of a random approach on its last trial's runner, with that trial's metrics x slower."""
    with Session(engine) as s:
        last = (
            s.execute(select(Trial).where(col(Trial.runner_id).is_not(None)).order_by(col(Trial.id).desc()))
            .scalars()
            .first()
        )
        assert last is not None
        approach_id = rng.choice([a for (a,) in s.execute(select(col(Trial.approach_id)).distinct())])
        template = (
            s.execute(
                select(Trial)
                .where(Trial.approach_id == approach_id, col(Trial.runner_id).is_not(None))
                .order_by(col(Trial.id).desc())
            )
            .scalars()
            .first()
            or last
        )
        now = utcnow()
        trial = Trial(
            campaign_id=template.campaign_id,
            approach_id=template.approach_id,
            runner_id=template.runner_id,
            state=TrialState.succeeded,
            fingerprint=template.fingerprint,
            started_at=now,
            finished_at=now,
        )
        s.add(trial)
        s.flush()
        rows = s.execute(select(Metric).where(Metric.trial_id == template.id)).scalars().all()
        if rows:
            s.execute(
                insert(Metric),
                [
                    dict(
                        trial_id=trial.id,
                        approach_id=m.approach_id,
                        campaign_id=m.campaign_id,
                        seq=m.seq,
                        index=m.index,
                        name=m.name,
                        value=m.value * slower,
                        unit=m.unit,
                        tags=m.tags,
                        samples=m.samples,
                        samples_median=m.samples_median,
                        samples_cv=m.samples_cv,
                        samples_n=m.samples_n,
                        created_at=now,
                    )
                    for m in rows
                ],
            )
        s.commit()


def run(url: str, scale: float, new: int) -> None:
    from app.db import make_engine, migrate, session_scope
    from app.domain import changes
    from bench.pages_at_scale import build_campaign

    migrate(url)
    engine = make_engine(url)
    t = time.perf_counter()
    build_campaign(engine, approaches=max(1, int(500 * scale)), trials=int(50_000 * scale))
    print(f"built in {time.perf_counter() - t:.1f} s")
    statements = [0]
    event.listen(engine, "before_cursor_execute", lambda *a: statements.__setitem__(0, statements[0] + 1))
    cpu = time.process_time()
    pairs = 0
    with session_scope(engine) as s:
        while touched := changes.pass_once(s, limit=10_000):
            pairs += len(touched)
    print(
        f"first pass: {pairs} (approach, runner) pairs, {time.process_time() - cpu:.2f} s CPU, {statements[0]} statements"
    )
    rng = random.Random(7)
    per_trial, per_statements = [], []
    for i in range(new):
        add_trial(engine, rng, 1.06 if i % 2 else 1.0)
        statements[0] = 0
        cpu = time.process_time()
        with session_scope(engine) as s:
            assert len(changes.pass_once(s)) == 1
        per_trial.append(time.process_time() - cpu)
        per_statements.append(statements[0])
    print(
        f"per new trial: median {statistics.median(per_trial) * 1000:.1f} ms CPU (max {max(per_trial) * 1000:.1f}), "
        f"{statistics.median(per_statements):.0f} statements"
    )
    engine.dispose()


def _ml_split(values) -> int:
    """The maximum-likelihood location of one shift: the split with the least residual sum of squares."""
    import numpy as np

    v = np.asarray(values) - np.mean(values)
    n = v.size
    k = np.arange(1, n)
    left = np.cumsum(v)[:-1]
    return int(k[np.argmax(left**2 / k + left**2 / (n - k))])


def _ceiling_split(values, low: int, high: int, before: float, after: float, sd: float) -> int:
    """The best any locator can do on this design: everything known but the position (both means, the noise,
    the position uniform over low..high), the split with the most posterior mass within two points."""
    import numpy as np

    v = np.asarray(values)
    k = np.arange(low, high + 1)
    # log-likelihood of split k, up to a constant: the values from k on are `after`, those before `before`.
    gain = np.cumsum(((v - before) ** 2 - (v - after) ** 2)[::-1])[::-1] / (2 * sd * sd)  # gain[j]: from j on
    log_mass = gain[k]
    mass = np.exp(log_mass - log_mass.max())
    return int(k[np.argmax(np.convolve(mass, np.ones(5), mode="same"))])


# Designs: m points at least on each side of the shift, series of 3 m points, the shift uniform over m..2 m.
SIDES = (20, 30, 50)


def detection(series: int, flat_points: int, sides: tuple[int, ...] = SIDES) -> None:
    import numpy as np

    from app.domain import changes

    for m in sides:
        n = 3 * m
        rng = np.random.default_rng(24)
        found = ml = bayes = ceiling = 0
        for _ in range(series):
            at = int(rng.integers(m, 2 * m + 1))
            values = 100 * (1 + 0.03 * rng.standard_normal(n))
            values[at:] *= 1.05
            listed = [float(v) for v in values]
            found += any(abs(d.index - at) <= 2 for d in changes.detect(listed))
            ml += abs(_ml_split(listed) - at) <= 2
            bayes += abs(changes._relocate(listed, 0, len(listed)) - at) <= 2
            ceiling += abs(_ceiling_split(listed, m, 2 * m, 100.0, 105.0, 3.0) - at) <= 2
        rng = np.random.default_rng(25)
        points = false = 0
        while points < flat_points:
            flat = [float(v) for v in 100 * (1 + 0.03 * rng.standard_normal(n))]
            false += len(changes.detect(flat))
            points += len(flat)
        print(f"{m} points at least on each side ({series} series of {n}, the shift at {m}..{2 * m}):")
        print(f"  planted 5% shifts at 3% noise found within 2 points: {found / series:.1%}")
        print(f"  oracle, one shift known, its maximum-likelihood location: {ml / series:.1%}")
        print(f"  oracle, one shift known, the board's locator (most posterior mass within 2): {bayes / series:.1%}")
        print(f"  ceiling, all but the position known (means, noise, position in {m}..{2 * m}): {ceiling / series:.1%}")
        print(
            f"  flat series of {n} at 3% noise, {points} points: {false} false, {1000 * false / points:.2f} per 1,000"
        )
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--new", type=int, default=10)
    parser.add_argument("--detection", action="store_true", help="detection and false-alarm rates, no database")
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--flat-points", type=int, default=30_000)
    parser.add_argument("--sides", type=int, nargs="+", default=list(SIDES), help="points at least on each side")
    args = parser.parse_args()
    if args.detection:
        detection(args.series, args.flat_points, tuple(args.sides))
        return
    if args.db == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            run(f"sqlite:///{tmp}/bench.db", args.scale, args.new)
        return
    from tests.support.databases import make_postgres_db

    admin = os.environ.get("CAMPAIGN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    url, drop = make_postgres_db(admin)
    try:
        run(url, args.scale, args.new)
    finally:
        drop()


if __name__ == "__main__":
    main()
