"""One selected row, with its config and workflow run, made into a card; and a card back as
InferenceX's per-result row (`export`).

The workload, as InferenceX's client sends it (read to learn, nothing copied):

- InferenceX `benchmarks/benchmark_lib.sh` and `utils/bench_serving/benchmark_serving.py`:
  `--dataset-name random --random-range-ratio 0.8` (`.github/workflows/benchmark-tmpl.yml`'s
  RANDOM_RANGE_RATIO), lengths uniform on the whole numbers [int(0.8 L), L],
  `--num-prompts 10 x CONC` (the recipe scripts), `--num-warmups 2 x CONC`,
  `--request-rate inf --max-concurrency CONC --ignore-eos`, percentiles 90, 99, 99.9.

What maps to what: the row's `id` is the card's point_id (a row without one: "row N", its
place in the file); config `hardware` (`hw`) -> gpu_model; `framework` -> engine name;
`image` -> engine image; workflow run `head_sha` -> engine commit (InferenceX's own commit,
whose recipe scripts hold the launch flags, not the engine's); tp/ep/pp/dcp_size/pcp_size/
dp_attention (0 or 1) and the disaggregated prefill_*/decode_* counts -> parallelism;
`conc`/`isl`/`osl` -> a closed-loop workload; each figure keeps its name, value and unit
(tok/s/gpu, s, tok/s/user; a `_ms` name keeps ms). `computed_as`: tput_per_gpu ->
input_output_tok_s_per_gpu and output_tput_per_gpu -> output_tok_s_per_gpu (with a GPU
count; the second not when disaggregated), median_intvty -> interactivity, a ms-valued
mean/median/p99 latency -> its *_ms literal; the seconds-valued latencies have no literal
(None), nor have input_tput_per_gpu, std and p90/p99.9 statistics. A point is one nightly
sample (samples_published 1). Everything else the row, its config and its workflow run say
(non-figure metrics as `metrics.<name>`, the run's as `workflow_run.<name>`) is in `extra`,
as text clipped to 200 characters. A disaggregated or multi-node row says in
`not_reproducible` that one 4-GPU host cannot reproduce it; a row whose GPU count cannot be
told is still a card (gpu_count None, the per-GPU figures not computable, said in `missing`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.errors import CardError, one_line, validation_message
from bench.publishers.inferencex.figures import _figure, _figure_order
from bench.publishers.inferencex.select import _side_row
from bench.publishers.inferencex.values import (
    CONFIGS_FILE,
    MAX_FIGURE,
    RESULTS_FILE,
    RUNS_FILE,
    WHAT,
    _clip,
    _count,
    _flag,
    _id_text,
    _number,
    _show,
    _text,
)
from bench.publishers.model import (
    PublishedEngine,
    PublishedFigure,
    PublishedWorkload,
    PublisherCard,
)

RANGE_RATIO = 0.8  # the workflow's RANDOM_RANGE_RATIO
PROMPTS_PER_STREAM = 10  # --num-prompts CONC x 10 (the recipe scripts)
WARMUPS_PER_STREAM = 2  # --num-warmups 2 x CONC (benchmark_lib.sh)

MAX_EXTRA = 400  # entries of extra; the rest is counted

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class _Builder:
    """One selected row, with its config and workflow run, made into a card."""

    def __init__(
        self,
        table: Path,
        row: dict[str, Any],
        rid: str,
        configs: Path | None,
        runs: Path | None,
    ) -> None:
        self.table, self.row, self.rid = table, row, rid
        self.where = f"{table}: row {_show(rid)}"
        nested = "metrics" in row
        metrics = row.get("metrics") if nested else row
        if not isinstance(metrics, dict):
            raise CardError(f"{self.where}: metrics is not a JSON object: not {WHAT}")
        self.nested = nested
        self.metrics: dict[str, Any] = metrics
        self.config: dict[str, Any] | None = None
        self.missing: list[str] = []
        if "config_id" in row:
            cid = _id_text(row["config_id"])
            self.config = _side_row(configs, cid)
            if self.config is None and "model" not in row:
                where = f"is not in {configs}" if configs else f"has no {CONFIGS_FILE} beside it"
                raise CardError(
                    f"{self.where}: its config_id {_show(cid)} {where}: give the whole "
                    f"unzipped dump folder ({CONFIGS_FILE}, {RUNS_FILE}, {RESULTS_FILE})"
                )
        self.run: dict[str, Any] | None = None
        if "workflow_run_id" in row:
            self.run = _side_row(runs, _id_text(row["workflow_run_id"]))
        # Its config's fields (not its id), and over them the row's own.
        self.view: dict[str, Any] = {}
        if self.config:
            self.view.update((k, v) for k, v in self.config.items() if k != "id")
        self.view.update(row)
        self.used: set[str] = {"metrics"}
        self.used_metrics: set[str] = set()

    # field access, marking what the card uses so that `extra` holds the rest
    def get(self, *names: str) -> Any:
        for name in names:
            if name in self.view:
                self.used.add(name)
                return self.view[name]
            if self.nested and name in self.metrics:
                self.used_metrics.add(name)
                return self.metrics[name]
        return None

    def text(self, *names: str) -> str | None:
        value = self.get(*names)
        if value is None:
            return None
        return _clip(_text(value)).strip() or None

    def whole(self, name: str, *, required: bool = False, least: int = 1) -> int | None:
        value = self.get(name)
        if value is None and not required:
            return None
        n = _count(value)
        if n is None or n < least:
            raise CardError(
                f"{self.where}: {name} is {_show(value)}: not a whole number of at least "
                f"{least}; give the dump as released"
            )
        return n

    def card(self) -> PublisherCard:
        try:
            return self.build()
        except ValidationError as exc:
            raise CardError(f"{self.where}: {validation_message(exc)}: not {WHAT}") from None

    def build(self) -> PublisherCard:
        model = self.text("model")
        if model is None:
            raise CardError(f"{self.where}: the row and its config name no model: not {WHAT}")
        self.used.add("id")  # the point id
        disagg = bool(_flag(self.view.get("disagg")))  # both stay in extra as published
        multinode = _flag(self.view.get("is_multinode"))
        parallelism = self.parallelism(disagg)
        gpus = self.gpu_count(disagg, parallelism)
        figures = self.figures(gpus, disagg)
        error = self.get("error")
        if error is not None:
            raise CardError(
                f"{self.where} records a failed run (error {_show(error)}): nothing to "
                "reproduce; select another row"
            )
        if not figures:
            raise CardError(
                f"{self.where} has no figures (tput_per_gpu, median_ttft, ...): not a result "
                f"of {WHAT}"
            )
        workload = self.workload()
        engine = PublishedEngine(
            name=self.text("framework"),
            version=self.text("framework_version", "engine_version"),
            commit=self.run_text("head_sha"),
            image=self.text("image"),
            parallelism=parallelism,
        )
        self.note_missing(engine, gpus)
        date = self.text("date")
        match = _DATE.match(date or "")
        return PublisherCard(
            publisher="inferencex",
            source=self.table.name,
            point_id=self.rid,
            date=match.group(0) if match else date,
            model=model,
            precision=self.text("precision"),
            gpu_model=self.text("hardware", "hw"),
            gpu_count=gpus,
            nodes=1 if multinode is False else None,
            engine=engine,
            workload=workload,
            figures=tuple(sorted(figures, key=_figure_order)),
            samples_published=1,
            missing=tuple(self.missing),
            not_reproducible=tuple(self.not_reproducible(disagg, bool(multinode), parallelism)),
            extra=self.extra(),
        )

    def run_text(self, name: str) -> str | None:
        if self.run is not None and self.run.get(name) is not None:
            return _clip(_text(self.run[name])).strip() or None
        return self.text(name)

    def parallelism(self, disagg: bool) -> dict[str, int]:
        out: dict[str, int] = {}
        if disagg:
            names = [
                f"{role}_{k}"
                for role in ("prefill", "decode")
                for k in ("tp", "ep", "pp", "dcp_size", "pcp_size", "dp_attention", "num_workers")
            ] + ["num_prefill_gpu", "num_decode_gpu"]
            for name in names:
                self.put(out, name, name)
            return out
        # One engine: the database mirrors it into the prefill_ and decode_ columns.
        for name in ("tp", "ep", "pp", "dcp_size", "pcp_size", "dp_attention", "dp", "num_gpus"):
            self.put(out, name, name, f"decode_{name}")
        return out

    def put(self, out: dict[str, int], key: str, *names: str) -> None:
        value = self.get(*names)
        if value is None:
            return
        if key.endswith("dp_attention"):
            flag = _flag(value)
            if flag is not None:
                out[key] = int(flag)
            return
        n = _count(value)
        if n is not None:
            out[key] = n

    def gpu_count(self, disagg: bool, par: dict[str, int]) -> int | None:
        """The GPUs process_result.py divides by: prefill + decode GPUs when disaggregated,
        else tp x pp x pcp_size (num_gpus when the row says it)."""
        if disagg:
            p, d = par.get("num_prefill_gpu"), par.get("num_decode_gpu")
            total = p + d if p is not None and d is not None else None
        elif par.get("num_gpus"):
            total = par["num_gpus"]
        elif par.get("tp"):
            total = par["tp"] * (par.get("pp") or 1) * (par.get("pcp_size") or 1)
        else:
            total = None
        return total if total is not None and 1 <= total <= 1_000_000 else None

    def figures(self, gpus: int | None, disagg: bool) -> list[PublishedFigure]:
        out: list[PublishedFigure] = []
        for name, value in self.metrics.items():
            kind = _figure(name, self.where)
            if kind is None:
                continue
            unit, definition, computed = kind
            v = _number(value)
            if v is None:
                raise CardError(
                    f"{self.where}: {one_line(name)} is {_show(value)}: not a finite number "
                    f"in 0..{MAX_FIGURE:g}; give the dump as released"
                )
            if computed in ("input_output_tok_s_per_gpu", "output_tok_s_per_gpu") and (
                gpus is None or (disagg and computed == "output_tok_s_per_gpu")
            ):
                computed = None
            out.append(
                PublishedFigure(
                    name=name, value=v, unit=unit, definition=definition, computed_as=computed
                )
            )
            (self.used_metrics if self.nested else self.used).add(name)
        return out

    def workload(self) -> PublishedWorkload:
        conc = self.whole("conc", required=True)
        assert conc is not None
        isl, osl = self.whole("isl"), self.whole("osl")
        kind = (self.text("benchmark_type") or "single_turn").lower()
        single = kind == "single_turn"
        ratio = _number(self.get("random_range_ratio"))
        if ratio is None or ratio > 1:
            ratio = RANGE_RATIO if single else None
        prompts = self.whole("num_prompts")
        warmups = self.whole("num_warmups", least=0)
        said = []
        if prompts is None and single:
            prompts = PROMPTS_PER_STREAM * conc
            said.append(f"num_prompts = {PROMPTS_PER_STREAM} x concurrency")
        if warmups is None and single:
            warmups = WARMUPS_PER_STREAM * conc
            said.append(f"warmups = {WARMUPS_PER_STREAM} x concurrency")
        rule = None
        if single:
            rule = (
                f"input and output lengths each uniform on the whole numbers "
                f"[int({ratio:g} x L), L] (InferenceX's benchmark_serving.py, "
                f"--random-range-ratio {ratio:g}); requests sent at rate inf, at most "
                f"{conc} at a time; ignore_eos"
            )
            if said:
                rule += (
                    "; "
                    + " and ".join(said)
                    + " by the client's rule (benchmarks/benchmark_lib.sh and the recipe "
                    "scripts), not from the row"
                )
        return PublishedWorkload(
            arrivals="closed",
            dataset="random" if single else kind,
            concurrency=conc,
            input_tokens=isl,
            output_tokens=osl,
            range_ratio=ratio,
            length_rule=rule,
            num_prompts=prompts,
            warmups=warmups,
            ignore_eos=True if single else None,
        )

    def note_missing(self, engine: PublishedEngine, gpus: int | None) -> None:
        if gpus is None:
            self.missing.append("GPU count: a per-GPU figure cannot be computed")
        where = f" at commit {engine.commit}" if engine.commit else ""
        self.missing.append(
            f"launch flags (the dump has none: InferenceX's recipe script for this "
            f"configuration{where} holds them)"
        )
        if engine.image is None:
            self.missing.append("image (the row has none: runs before 2025-12-08 recorded none)")
        if engine.commit is None:
            self.missing.append(f"commit (no workflow run for the row: {RUNS_FILE} beside it?)")
        if engine.name is None:
            self.missing.append("framework")
        if self.text("hardware", "hw") is None:
            self.missing.append("hardware")

    def not_reproducible(self, disagg: bool, multinode: bool, par: dict[str, int]) -> list[str]:
        out: list[str] = []
        if disagg:
            shape = ", ".join(
                f"{role}: {par.get(f'{role}_num_workers', '?')} worker(s), "
                f"{par.get(f'num_{role}_gpu', '?')} GPUs"
                for role in ("prefill", "decode")
            )
            out.append(
                f"disaggregated prefill/decode serving{' on several nodes' if multinode else ''}"
                f" ({shape}): one 4-GPU host cannot reproduce it; its figures are the whole "
                "deployment's"
            )
        elif multinode:
            out.append("multi-node serving: one 4-GPU host cannot reproduce it")
        kind = (self.text("benchmark_type") or "single_turn").lower()
        if kind != "single_turn":
            out.append(
                f"benchmark_type {kind}: not InferenceX's random single-turn client, which is "
                "the workload a reproduction runs"
            )
        return out

    def extra(self) -> dict[str, str]:
        out: dict[str, str] = {}
        items: list[tuple[str, Any]] = [(k, v) for k, v in self.view.items() if k not in self.used]
        if self.nested:
            items += [
                (f"metrics.{k}", v) for k, v in self.metrics.items() if k not in self.used_metrics
            ]
        if self.run is not None:
            items += [
                (f"workflow_run.{k}", v) for k, v in self.run.items() if k not in ("id", "head_sha")
            ]
        for key, value in items:
            if len(out) >= MAX_EXTRA:
                out["extra_clipped"] = f"{len(items) - MAX_EXTRA} more fields not kept"
                break
            out[_clip(str(key), 100)] = _clip(_text(value))
        return out


def export(card: PublisherCard) -> dict[str, Any]:
    """The card as InferenceX's per-result row: the identifying fields under process_result.py's
    names, the parallelism, and every figure under its own name, value and unit as published
    (a dump row's `metrics[name]`, a per-result row's `[name]`)."""
    if card.publisher != "inferencex":
        raise CardError(f"card {one_line(card.point_id)} is {card.publisher}'s, not InferenceX's")
    w = card.workload
    out: dict[str, Any] = {
        "id": card.point_id,
        "date": card.date,
        "hw": card.gpu_model,
        "framework": card.engine.name,
        "model": card.model,
        "precision": card.precision,
        "isl": w.input_tokens,
        "osl": w.output_tokens,
        "conc": w.concurrency,
        "image": card.engine.image,
        "head_sha": card.engine.commit,
    }
    out.update(card.engine.parallelism)
    out.update((f.name, f.value) for f in card.figures)
    return out
