"""The pieces of the SLURM path that need no cluster: the batch script's quoting, the rank
environment under srun, GRES parsing, and the nodes x GPUs "can run" rules."""

from __future__ import annotations

import subprocess

import pytest
from pydantic import ValidationError

from app.domain.runners import unmet_requirements
from app.protocol.recipes import RecipeError
from app.schemas import Requirements
from runners.executors.slurm import SlurmConfig, batch_script, job_shape, parse_exit_code, tasks_per_node
from runners.fingerprint import gres_gpus_of
from runners.recipes import LaunchSpec
from runners.recipes._dist import rank_env_from_launcher


def test_batch_script_runs_hostile_argv_and_env_literally(tmp_path):
    marker = tmp_path / "pwned"
    argv = ["printf", "%s|", f"$(touch {marker})", "`id`", "a'b\"c", "; rm -rf /", "$HOME"]
    spec = LaunchSpec(argv=argv, env={"WEIRD": f"$(touch {marker}) 'q'"})
    done = subprocess.run(
        ["bash", "-c", batch_script(spec, "att'1", 7, 1, 1).replace("exec ", "")], capture_output=True, text=True
    )
    assert done.stdout == "|".join(argv[2:]) + "|"
    env = subprocess.run(
        ["bash", "-c", batch_script(LaunchSpec(argv=["printenv", "WEIRD"], env=spec.env), "a", 1, 1, 1)],
        capture_output=True,
        text=True,
    )
    assert env.stdout == f"$(touch {marker}) 'q'\n"
    assert not marker.exists()


def test_batch_script_refuses_a_bad_variable_name():
    with pytest.raises(RecipeError, match="not a variable name"):
        batch_script(LaunchSpec(argv=["true"], env={"A=B; x": "1"}), "a", 1, 1, 1)


def test_multi_node_script_launches_one_task_per_gpu_through_srun_task():
    spec = LaunchSpec(argv=["/venv/bin/python", "-m", "runners.recipes.allreduce", "--backend=nccl"])
    script = batch_script(spec, "a", 1, nodes=2, tasks_per_node=8)
    last = script.strip().splitlines()[-1]
    assert last == (
        "exec srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=8 /venv/bin/python -m "
        "runners.executors.srun_task -- /venv/bin/python -m runners.recipes.allreduce --backend=nccl"
    )
    assert "export MASTER_ADDR=" in script and "export MASTER_PORT=" in script


def test_job_shape_from_requirements_and_config():
    config = SlurmConfig(gpus_per_node=8)
    assert job_shape(None, config) == (1, 8, [])
    assert job_shape({"nodes": 2, "gpus_per_node": 4, "sbatch": ["--qos=high"]}, config) == (2, 4, ["--qos=high"])
    with pytest.raises(RecipeError):
        job_shape({"nodes": 0}, config)
    with pytest.raises(RecipeError, match="set by the runner"):
        job_shape({"sbatch": ["-o", "x"]}, config)


def test_tasks_per_node_from_requirements():
    assert tasks_per_node({"nodes": 2, "tasks_per_node": 2}, 2, 0) == 2  # 2 CPU ranks per node
    assert tasks_per_node({"nodes": 2, "tasks_per_node": 4}, 2, 8) == 4  # asked: wins over one per GPU
    assert tasks_per_node({"nodes": 2}, 2, 8) == 8  # one per GPU
    assert tasks_per_node({"nodes": 2}, 2, 0) == 1
    assert tasks_per_node({"tasks_per_node": 4}, 1, 8) == 1  # one node: the recipe launches its ranks
    with pytest.raises(RecipeError, match="tasks_per_node"):
        tasks_per_node({"tasks_per_node": "two"}, 2, 0)
    with pytest.raises(RecipeError, match="tasks_per_node"):
        tasks_per_node({"tasks_per_node": -1}, 2, 0)


def test_tasks_per_node_in_approach_requirements():
    assert Requirements.model_validate({"nodes": 2, "tasks_per_node": 2}).model_dump() == {
        "gpus": 0,
        "min_sm": None,
        "software": [],
        "nodes": 2,
        "tasks_per_node": 2,
    }
    assert "tasks_per_node" not in Requirements.model_validate({"nodes": 2}).model_dump()
    with pytest.raises(ValidationError):
        Requirements.model_validate({"tasks_per_node": -1})


def test_rank_env_from_srun_and_torchrun():
    slurm = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS_PER_NODE": "4(x2)",
        "SLURM_NODEID": "1",
    }
    assert rank_env_from_launcher(slurm) == {
        "CAMPAIGN_RANK_WORKER": "1",
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "NODE_RANK": "1",
    }
    assert rank_env_from_launcher({"RANK": "0", "WORLD_SIZE": "2", **slurm}) == {"CAMPAIGN_RANK_WORKER": "1"}
    assert rank_env_from_launcher({}) == {}


def test_gres_and_exit_codes():
    assert gres_gpus_of("gpu:h200:8(S:0-1)") == (8, "h200")
    assert gres_gpus_of("gpu:4") == (4, "")
    assert gres_gpus_of("(null)") == (0, "")
    assert parse_exit_code("3:0") == (3, None)
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_exit_code("") == (None, None)


def test_nodes_and_gpus_per_node_rules():
    node = {"gpu_count": 8, "sm": "9.0"}
    partition = {"gpu_count": 8, "sm": "9.0", "slurm": {"partition": "h200", "nodes": 4, "gpus_per_node": 8}}
    assert unmet_requirements({"nodes": 2, "gpus_per_node": 8}, partition) == []
    assert unmet_requirements({"nodes": 2}, node) == ["2 nodes (a SLURM partition with 2 or more)"]
    assert unmet_requirements({"nodes": 8}, partition) == ["8 nodes (a SLURM partition with 8 or more)"]
    assert unmet_requirements({"nodes": 2, "gpus_per_node": 16}, partition) == ["16 GPUs per node"]
    assert unmet_requirements({"nodes": 1}, node) == []
