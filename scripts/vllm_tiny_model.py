"""Write the tiny models the vllm_server recipe and its tests serve, locally, with no hub.

    .cache/vllm/venv/bin/python scripts/vllm_tiny_model.py .cache/vllm/models

Writes, under the directory given (each a Hugging Face model directory vLLM loads with --model):
  tiny-llama         the target: a random Llama (hidden 128, 2 layers, vocabulary 2,048), seed 0
  tiny-llama-copy    a byte-for-byte copy of the target (a draft model that accepts ~every token)
  tiny-llama-random  the same shape with other random weights, seed 1 (a draft that should lose)
and in each the same byte-level BPE tokenizer, trained here with `tokenizers` on a corpus generated from a
fixed seed (so every clone makes the same one). Idempotent: a stamp file names what was written; a second
run with the same settings does nothing. Runs with the vLLM venv's python (transformers, tokenizers, torch).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

VOCAB = 2048
CONFIG = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
    "vocab_size": VOCAB,
}
STAMP = ".tiny-models-v1"
SYLLABLES = "ka lo mi ne ru sa ti vo ze ba de fi gu ha jo ku la mo nu pe qi ro su te vu wa xe yo zu".split()


def corpus(seed: int = 0, words: int = 60000) -> list[str]:
    rng = random.Random(seed)
    vocab = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    lines, line = [], []
    for _ in range(words):
        line.append(rng.choice(vocab))
        if len(line) >= rng.randint(6, 16):
            lines.append(" ".join(line) + rng.choice([".", ",", "!", "?", ";"]))
            line = []
    return lines


def tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(out)


def model(out: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**CONFIG, bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=False)
    net = LlamaForCausalLM(config).to(torch.bfloat16)
    net.save_pretrained(out, safe_serialization=True)


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else ".cache/vllm/models")
    stamp = root / STAMP
    if stamp.exists():
        print(f"vllm_tiny_model: models already in {root} ({stamp.name})", flush=True)
        return 0
    root.mkdir(parents=True, exist_ok=True)
    target, copy, rand = root / "tiny-llama", root / "tiny-llama-copy", root / "tiny-llama-random"
    for path in (target, copy, rand):
        shutil.rmtree(path, ignore_errors=True)
    print(f"vllm_tiny_model: training a {VOCAB}-token byte-level BPE tokenizer", flush=True)
    tokenizer(target)
    print(f"vllm_tiny_model: writing {target} (random Llama, seed 0)", flush=True)
    model(target, 0)
    print(f"vllm_tiny_model: copying it to {copy}", flush=True)
    shutil.copytree(target, copy)
    print(f"vllm_tiny_model: writing {rand} (same shape, seed 1)", flush=True)
    model(rand, 1)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (target / name).exists():
            shutil.copy2(target / name, rand / name)
    stamp.write_text(json.dumps(CONFIG, sort_keys=True) + "\n", encoding="utf-8")
    print(f"vllm_tiny_model: done: {target}, {copy}, {rand}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
