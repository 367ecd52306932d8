"""Write the tiny GGUF model the llama-server tests serve, offline, with no download.

A llama-architecture model with seeded random float32 weights (hidden 64, 4 layers, 4 query
and 2 KV heads of 64 / 4 = 16 dimensions, 32K positions) and a byte-level BPE tokenizer
("gpt2" model, "gpt-2" pre-tokenizer) whose merges are trained here, in plain Python, on
seeded pseudo-English. The vocabulary is 4 special tokens (<|begin_of_text|> is BOS and is
added to every prompt, <|end_of_text|> is EOS, <|im_start|>/<|im_end|> frame the ChatML chat
template), the 256 byte symbols and the merges, 4,096 tokens in all. Any text tokenizes (every
byte has a token), so /tokenize and /detokenize round-trip it.

The file is written with gguf-py, the GGUF library vendored in the same llama.cpp sources the
server is built from, so the format always matches the server. It is written under a
temporary name beside the target and renamed, so a crash never leaves half a model behind.

    python make_gguf.py GGUF_PY_DIR OUT.gguf     # needs numpy and pyyaml (gguf-py's imports)

tests/setup/llamacpp.sh runs it in its own virtualenv. Same inputs, same bytes: the output is
deterministic (no clock, no host name is written).
"""

from __future__ import annotations

import heapq
import os
import random
import re
import sys
import tempfile
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

NAME = "tiny-llama"
CONTEXT_LENGTH = 32_768
HIDDEN = 64
LAYERS = 4
HEADS = 4
KV_HEADS = 2
FFN = 192
VOCAB_SIZE = 4_096
ROPE_THETA = 500_000.0
RMS_EPS = 1e-5
SEED = 0
BOS, EOS, IM_START, IM_END = "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [BOS, EOS, IM_START, IM_END]
# ChatML, as the vLLM tests' model has; llama-server renders /v1/chat/completions with it.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The GPT-2 pre-tokenizer regex llama.cpp applies for tokenizer.ggml.pre = "gpt-2", with its
# \p{L} and \p{N} narrowed to ASCII: the training text below is ASCII, so the split is the same.
PRE_TOKENIZER = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"
)


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte (the "byte-level" alphabet), indexed by byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


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


def train_merges(lines: list[str], n_merges: int) -> list[tuple[str, str]]:
    """Byte-level BPE: repeatedly merge the most frequent adjacent pair (ties: the smallest
    pair), counted over pre-tokens, until n_merges or no pair occurs twice."""
    to_symbol = byte_symbols()
    counts = Counter(
        "".join(to_symbol[b] for b in piece.encode())
        for line in lines
        for piece in PRE_TOKENIZER.findall(line)
    )
    words = [list(word) for word in counts]
    freqs = list(counts.values())
    pair_count: Counter[tuple[str, str]] = Counter()
    holders: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for i, word in enumerate(words):
        for pair in pairwise(word):
            pair_count[pair] += freqs[i]
            holders[pair].add(i)
    heap = [(-count, pair) for pair, count in pair_count.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while heap and len(merges) < n_merges:
        negative, pair = heapq.heappop(heap)
        count = pair_count.get(pair, 0)
        if count != -negative:  # a stale entry: requeue at the current count
            if count > 0:
                heapq.heappush(heap, (-count, pair))
            continue
        if count < 2:
            break
        merges.append(pair)
        joined = pair[0] + pair[1]
        for i in holders.pop(pair):
            word, freq = words[i], freqs[i]
            for old in pairwise(word):
                pair_count[old] -= freq
            merged: list[str] = []
            j = 0
            while j < len(word):
                if j + 1 < len(word) and (word[j], word[j + 1]) == pair:
                    merged.append(joined)
                    j += 2
                else:
                    merged.append(word[j])
                    j += 1
            words[i] = merged
            for new in pairwise(merged):
                pair_count[new] += freq
                holders[new].add(i)
            for new in set(pairwise(merged)):
                heapq.heappush(heap, (-pair_count[new], new))
        del pair_count[pair]
    return merges


def tokenizer() -> tuple[list[str], list[int], list[str]]:
    """Tokens (byte-level strings), their GGUF token types, and the merges as "a b"."""
    merges = train_merges(
        training_text(random.Random(SEED)), VOCAB_SIZE - len(SPECIAL_TOKENS) - 256
    )
    tokens = SPECIAL_TOKENS + byte_symbols() + [a + b for a, b in merges]
    if len(set(tokens)) != len(tokens):
        raise SystemExit("make_gguf: the trained vocabulary has duplicate tokens")
    normal, control = 1, 3  # gguf.TokenType.NORMAL, .CONTROL
    types = [control] * len(SPECIAL_TOKENS) + [normal] * (len(tokens) - len(SPECIAL_TOKENS))
    return tokens, types, [f"{a} {b}" for a, b in merges]


def weights(vocab: int) -> dict[str, np.ndarray[Any, np.dtype[np.float32]]]:
    """Seeded N(0, 0.02) matrices and unit RMS-norm gains, shaped (out, in) as in PyTorch
    (gguf-py reverses them into GGML's order). The output layer shares token_embd."""
    rng = np.random.default_rng(SEED)
    head_dim = HIDDEN // HEADS

    def matrix(rows: int, cols: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    def ones() -> np.ndarray[Any, np.dtype[np.float32]]:
        return np.ones(HIDDEN, dtype=np.float32)

    tensors = {"token_embd.weight": matrix(vocab, HIDDEN), "output_norm.weight": ones()}
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        tensors |= {
            f"{block}.attn_norm.weight": ones(),
            f"{block}.attn_q.weight": matrix(HEADS * head_dim, HIDDEN),
            f"{block}.attn_k.weight": matrix(KV_HEADS * head_dim, HIDDEN),
            f"{block}.attn_v.weight": matrix(KV_HEADS * head_dim, HIDDEN),
            f"{block}.attn_output.weight": matrix(HIDDEN, HEADS * head_dim),
            f"{block}.ffn_norm.weight": ones(),
            f"{block}.ffn_gate.weight": matrix(FFN, HIDDEN),
            f"{block}.ffn_up.weight": matrix(FFN, HIDDEN),
            f"{block}.ffn_down.weight": matrix(HIDDEN, FFN),
        }
    return tensors


def write(gguf: Any, path: Path) -> None:
    tokens, types, merges = tokenizer()
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(NAME)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(tokens))
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index(BOS))
    writer.add_eos_token_id(tokens.index(EOS))
    writer.add_eot_token_id(tokens.index(IM_END))
    writer.add_pad_token_id(tokens.index(EOS))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in weights(len(tokens)).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: make_gguf.py GGUF_PY_DIR OUT.gguf", file=sys.stderr)
        return 2
    sys.path.insert(0, argv[1])
    import gguf  # type: ignore[import-not-found]

    target = Path(argv[2])
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(handle)
    try:
        write(gguf, Path(staging))
        Path(staging).chmod(0o644)
        Path(staging).replace(target)
    finally:
        Path(staging).unlink(missing_ok=True)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
