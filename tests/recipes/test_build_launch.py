"""build_launch for every kind: argv lists, validation before launch, the env every trial gets."""

from __future__ import annotations

import pytest

from app.protocol.recipes import RecipeError
from runners.recipes import SAFE_ENV, build_launch
from tests.support.recipes import run_module

PY = "/envs/runner/bin/python"


def test_collective_kinds_launch_their_module_with_validated_flags():
    spec = build_launch(
        {
            "kind": "allreduce",
            "params": {"backend": "nccl", "tokens": [1, 4, 8, 64], "mode": "graph"},
            "env": {"NCCL_ALGO": "Tree"},
            "timeout_s": 300,
        },
        python=PY,
    )
    assert spec.argv[:3] == [PY, "-m", "runners.recipes.allreduce"]
    assert "--backend=nccl" in spec.argv and "--tokens=1,4,8,64" in spec.argv and "--mode=graph" in spec.argv
    assert "--graph-allreduces=122" in spec.argv and "--hidden-size=7168" in spec.argv
    assert spec.env["NCCL_ALGO"] == "Tree" and spec.timeout_s == 300
    for key, value in SAFE_ENV.items():
        assert spec.env[key] == value
    vs = build_launch({"kind": "verify_step", "params": {"layers": 61, "tokens": 4}}, python=PY)
    assert vs.argv[:3] == [PY, "-m", "runners.recipes.verify_step"] and "--layers=61" in vs.argv


def test_safe_env_is_a_default_not_an_override():
    spec = build_launch(
        {"kind": "allreduce", "params": {}, "env": {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}}
    )
    assert spec.env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert set(SAFE_ENV) == {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}


def test_sglang_server_nested_params_become_flags():
    spec = build_launch(
        {
            "kind": "sglang_server",
            "params": {
                "model_path": "/models/Kimi-K2.5",
                "tp_size": 8,
                "flags": ["--enable-torch-symm-mem"],
                "speculative": {"algorithm": "EAGLE3", "draft_model_path": "/models/eagle3", "num_draft_tokens": 4},
                "sglang_python": "/envs/sglang/bin/python",
                "bench": {"tool": "bench_serving", "num_prompts": 8},
            },
        },
        python=PY,
    )
    assert spec.argv[:3] == [PY, "-m", "runners.recipes.sglang_server"]
    for flag in (
        "--model-path=/models/Kimi-K2.5",
        "--tp-size=8",
        "--server-arg=--enable-torch-symm-mem",
        "--speculative-algorithm=EAGLE3",
        "--speculative-draft-model-path=/models/eagle3",
        "--speculative-num-draft-tokens=4",
        "--sglang-python=/envs/sglang/bin/python",
        "--num-prompts=8",
    ):
        assert flag in spec.argv
    assert not any(a.startswith("--speculative-num-steps") for a in spec.argv)  # unset: sglang chooses


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        ({"kind": "allreduce", "params": {"backend": "gloo", "mode": "graph"}}, "params.mode (--mode)"),
        ({"kind": "allreduce", "params": {"backend": "mpi"}}, "params.backend (--backend): must be one of"),
        ({"kind": "allreduce", "params": {"tokens": [1, 0]}}, "params.tokens (--tokens)"),
        ({"kind": "allreduce", "params": {"iters": True}}, "params.iters (--iters): must be an integer"),
        ({"kind": "verify_step", "params": {"layer": 3}}, "params.layer: unknown parameter"),
        ({"kind": "verify_step", "params": {"world_size": 3, "hidden_size": 7168}}, "params.hidden_size"),
        ({"kind": "sglang_server", "params": {"tp_size": 8}}, "params.model_path (--model-path): is required"),
        (
            {"kind": "sglang_server", "params": {"model_path": "m", "speculative": {"algo": "EAGLE3"}}},
            "params.speculative.algo: unknown key",
        ),
        ({"kind": "sglang_server", "params": {"model_path": "m", "bench": {"tool": "ab"}}}, "params.bench_tool"),
        ({"kind": "sglang_server", "params": {"model_path": "m", "flags": "--enable-mscclpp"}}, None),
        ({"kind": "command", "params": {"argv": "ls -la"}}, "params.argv"),
        ({"kind": "nope"}, "kind: unknown recipe kind"),
        ({"kind": "allreduce", "timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_recipes_fail_before_launch(recipe, message):
    if message is None:  # a single string is accepted as a one-element list
        assert "--server-arg=--enable-mscclpp" in build_launch(recipe).argv
        return
    with pytest.raises(RecipeError) as err:
        build_launch(recipe)
    assert message in str(err.value)


def test_cli_and_build_launch_share_one_validator():
    with pytest.raises(RecipeError) as err:
        build_launch({"kind": "verify_step", "params": {"tokens": "four"}})
    done = run_module("runners.recipes.verify_step", "--tokens", "four", timeout=60)
    assert done.returncode == 2
    assert str(err.value) in done.stderr


def test_every_recipe_module_has_help():
    for module in (
        "allreduce",
        "verify_step",
        "draft_step",
        "sglang_server",
        "engine_acceptance",
        "moe_step",
        "command",
    ):
        done = run_module(f"runners.recipes.{module}", "--help", timeout=60)
        assert done.returncode == 0 and "usage:" in done.stdout, module


def test_every_kind_comes_from_the_one_registry_with_one_contract():
    from runners.recipes import Recipe, recipes

    kinds = recipes()
    assert set(kinds) == {
        "command",
        "allreduce",
        "verify_step",
        "draft_step",
        "sglang_server",
        "vllm_server",
        "engine_acceptance",
        "moe_step",
    }
    for kind, recipe in kinds.items():
        assert isinstance(recipe, Recipe), kind
        assert callable(recipe.validate) and callable(recipe.argv), kind
    plain = build_launch({"kind": "command", "params": {"argv": ["true"]}, "env": {"A": "1"}})
    assert plain.argv == ["true"] and plain.env == {"A": "1"}  # a plain command runs as given


def test_a_new_recipe_is_one_new_module(tmp_path, monkeypatch):
    import runners.recipes as package

    (tmp_path / "echo_kind.py").write_text(
        "from runners.recipes import Recipe\n"
        "RECIPE = Recipe(spec=(), validate=lambda p: dict(p), argv=lambda v, py: [py, '-c', 'print(1)'],"
        " safe_env=True)\n"
    )
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    spec = build_launch({"kind": "echo_kind", "params": {}}, python=PY)
    assert spec.argv == [PY, "-c", "print(1)"] and spec.env["NCCL_NVLS_ENABLE"] == "0"
