"""A vllm_server trial that never gets ready is classified like every other failure, from real vLLM 0.32
logs (tests/fixtures/logs/vllm_*.log, written by the recipe against the engine in .cache/vllm): an unknown
flag, a model path that is not there, a KV cache beyond the host's memory, a readiness timeout, a port taken."""

from __future__ import annotations

from pathlib import Path

from app.domain.signatures import classify
from runners.recipes.vllm_server import MODEL_MISSING_MESSAGE, READY_TIMEOUT_IDLE, READY_TIMEOUT_MESSAGE

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def test_an_unknown_vllm_flag_is_named_for_vllm_not_sglang():
    found = classify((LOGS / "vllm_unknown_flag.log").read_text(), exit_code=1)
    assert found is not None
    assert (found.signature, found.verdict) == ("unknown_flag", "retest")
    assert found.cause == "flag not supported by this vLLM: --bogus-flag"
    assert found.bound_to is None  # no vllm stack component (yet): the verdict is not version-bound
    assert found.evidence_line == "api_server.py: error: unrecognized arguments: --bogus-flag"


def test_a_missing_model_path_is_its_own_cause():
    found = classify((LOGS / "vllm_model_path_missing.log").read_text(), exit_code=1)
    assert found is not None
    assert (found.signature, found.verdict) == ("model_path_missing", "retest")
    assert found.cause == "model path missing: /home/ci/board/.cache/vllm/models/no-such-model"
    # vLLM's own words when the recipe cannot tell (a name that is no local path and no hub id)
    raw = "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/models/gone'. Use `repo_type`"
    again = classify(raw, exit_code=1)
    assert again is not None and again.cause == "model path missing: /models/gone"


def test_a_kv_cache_beyond_the_hosts_memory_is_out_of_memory():
    found = classify((LOGS / "vllm_cpu_kv_cache_oom.log").read_text(), exit_code=1)
    assert found is not None
    assert (found.signature, found.verdict) == ("host_oom", "dead_end")
    assert "less than requested memory for kv (200.0 GiB)" in (found.evidence_line or "")


def test_the_recipes_readiness_timeout_is_classified():
    line = READY_TIMEOUT_MESSAGE.format(timeout=600, url="http://127.0.0.1:18000") + READY_TIMEOUT_IDLE.format(idle=5)
    found = classify("INFO starting\n" + line + "\n", exit_code=3)
    assert found is not None
    assert (found.signature, found.cause) == ("readiness_timeout", "server not ready within 600s")


def test_the_model_message_is_the_one_the_signature_reads():
    found = classify(MODEL_MISSING_MESSAGE.format(path="/x/y") + "\n", exit_code=1)
    assert found is not None and found.signature == "model_path_missing"
