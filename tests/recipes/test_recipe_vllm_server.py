"""The vllm_server recipe's front door, without an engine: its params are checked by the one validator (the
board refuses what the runner would), its speculative config against vLLM 0.32's keys, its launch line is
an argv list, and its prompt set is the same for every window and trial. The recipe against the real
engine: tests/contract/test_vllm_engine.py."""

from __future__ import annotations

import json

import pytest

from app.protocol.recipes import RecipeError
from runners.recipes import build_launch
from runners.recipes.engine_acceptance import parse_exposition
from runners.recipes.vllm_server import SERVER_MODULE, SPECULATIVE_KEYS, STEPS, prompts, server_argv, validate

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def test_the_recipe_takes_the_speculative_config_as_the_panel_prints_it():
    spec = build_launch(
        {"kind": "vllm_server", "params": {"model": "/m", "speculative_config": NGRAM, "batch": [4, 1]}},
        python="/py",
    )
    assert spec.argv[:3] == ["/py", "-m", "runners.recipes.vllm_server"]
    config = next(a for a in spec.argv if a.startswith("--speculative-config="))
    assert json.loads(config.split("=", 1)[1]) == NGRAM
    assert "--batch=1,4" in spec.argv  # sorted, each once


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"method": "ngram", "num_speculative_tokens": 3, "lookahead": 2}', "unknown key(s) lookahead for vLLM 0.32"),
        ('{"method": "ngram"}', "num_speculative_tokens must be an integer >= 1"),
        ('{"num_speculative_tokens": 2}', "give a method"),
    ],
)
def test_a_bad_speculative_config_is_refused_before_anything_starts(config, words):
    with pytest.raises(RecipeError) as err:
        validate({"model": "/m", "speculative_config": config})
    assert "params.speculative_config (--speculative-config)" in str(err.value)
    assert words in str(err.value)


def test_a_batch_size_schedule_is_a_key_vllm_032_accepts():
    config = {**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 1]]}
    assert "num_speculative_tokens_per_batch_size" in SPECULATIVE_KEYS
    values = validate({"model": "/m", "speculative_config": config})
    assert json.loads(values["speculative_config"]) == config


def test_lengths_that_do_not_fit_the_context_are_refused():
    with pytest.raises(RecipeError, match="params.max_model_len"):
        validate({"model": "/m", "input_len": 1000, "output_len": 100, "max_model_len": 1024})


def test_the_server_is_one_argv_list_with_the_engines_own_flags():
    values = validate({"model": "/m dir", "speculative_config": NGRAM, "server_args": ["--max-num-seqs", "8"]})
    argv = server_argv(values, 18000, True)
    assert argv[:3] == ["python3", "-m", SERVER_MODULE]
    assert argv[argv.index("--model") + 1] == "/m dir"  # a space stays inside its element
    assert "--enforce-eager" in argv and "--no-enable-prefix-caching" in argv
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == NGRAM
    assert argv[-2:] == ["--max-num-seqs", "8"]
    off = server_argv(validate({"model": "/m", "mode": "graph", "prefix_caching": "on"}), 18001, False)
    assert "--speculative-config" not in off and "--enforce-eager" not in off
    assert "--enable-prefix-caching" in off


def test_the_prompt_set_is_seeded_and_fixed():
    values = validate({"model": "/m", "input_len": 20})
    first, again = prompts(values, 3), prompts(values, 3)
    assert first == again and len(first) == 3 and all(len(p) == 20 for p in first)
    assert first[0][:8] == first[0][8:16]  # `repeats`: a phrase repeated (what n-gram lookup finds)
    other = prompts(validate({"model": "/m", "input_len": 20, "seed": 1}), 3)
    assert other != first
    randoms = prompts(validate({"model": "/m", "input_len": 20, "prompt_set": "random"}), 1)[0]
    assert randoms[:8] != randoms[8:16]


def test_the_step_counter_is_read_off_the_histogram_by_engine_acceptances_parser():
    text = (
        "# HELP vllm:iteration_tokens_total Histogram of tokens per engine step.\n"
        "# TYPE vllm:iteration_tokens_total histogram\n"
        'vllm:iteration_tokens_total_bucket{engine="0",le="1.0"} 3.0\n'
        'vllm:iteration_tokens_total_bucket{engine="0",le="+Inf"} 23.0\n'
        'vllm:iteration_tokens_total_count{engine="0"} 23.0\n'
        'vllm:iteration_tokens_total_sum{engine="0"} 192.0\n'
        'vllm:iteration_tokens_total_count{engine="1"} 2.0\n'
        'vllm:iteration_tokens_total_sum{engine="1"} 8.0\n'
    )
    scrape = parse_exposition(text, 0.0)
    assert scrape.histogram(STEPS) == (25.0, 200.0)  # summed over the engines' series
    assert scrape.histogram("vllm:absent") == (0.0, 0.0)


def test_the_panels_text_reaches_the_engine_byte_for_byte():
    printed = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
    spec = build_launch({"kind": "vllm_server", "params": {"model": "/m", "speculative_config": printed}})
    values = validate({"model": "/m", "speculative_config": printed})
    assert f"--speculative-config={printed}" in spec.argv
    argv = server_argv(values, 18000, True)
    assert argv[argv.index("--speculative-config") + 1] == printed
