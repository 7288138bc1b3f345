"""`campaign plan SLUG`: the payoff ranking and the upgrade table in a terminal, with clear errors."""


def test_plan_prints_the_ranking_and_what_an_upgrade_reopens(run):
    assert run("demo").returncode == 0
    r = run("plan", "kimi-k25-eagle3", "--target", "torch=2.11.0", "--target", "cuda=13.0")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "What to try next (Run next follows the ranking)" in out
    assert "next: FlashInfer PCIe-IPC allreduce: needs <= 200 us at 56 KiB; expected 5.3 us (reported)" in out
    assert "target: torch 2.10.0+cu128 -> 2.11.0, CUDA 12.8 -> 13.0" in out
    assert "re-opens FlashInfer allreduce fusion: the team's note: needs CUDA >= 13.0; the target has 13.0" in out
    assert "re-opens torch symmetric memory (--enable-torch-symm-mem): the team's note: needs torch >= 2.11" in out
    assert "leaves NCCL Tree algorithm: bound to NCCL, which the target does not change" in out


def test_plan_errors(run):
    assert run("demo").returncode == 0
    r = run("plan", "nope")
    assert r.returncode == 1 and "error:" in r.stderr
    r = run("plan", "kimi-k25-eagle3", "--target", "bogus=1")
    assert r.returncode == 1 and "unknown stack component 'bogus'" in r.stderr
