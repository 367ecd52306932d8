"""An MLPerf submission's system description, systems/<system>.json (e.g.
mlcommons/inference_results_v4.1 `closed/NVIDIA/systems/H200-SXM-141GBx8_TRT.json`): the
GPU model, GPUs per node and nodes, the engine from its framework, and the fields a card
keeps in `extra`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import CardError
from bench.publishers.mlperf.summary import MAX_EXTRA_VALUE
from bench.publishers.source import read_json

SYSTEM_WHAT = "an MLPerf system description"

_SYSTEM_EXTRA = (
    "submitter",
    "division",
    "status",
    "system_name",
    "system_type",
    "framework",
    "other_software_stack",
    "accelerator_model_name",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "host_processor_model_name",
    "operating_system",
    "sw_notes",
    "hw_notes",
)


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 1 else None
    if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]{0,6}", value.strip()):
        return int(value)
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = str(value).strip()
        return text[:MAX_EXTRA_VALUE] if text and text.upper() != "N/A" else None
    return None


def _engine_name(framework: str | None) -> str | None:
    low = (framework or "").lower()
    for needle, name in (
        ("vllm", "vllm"),
        ("sglang", "sglang"),
        ("tensorrt-llm", "trt-llm"),
        ("tensorrt_llm", "trt-llm"),
        ("trt-llm", "trt-llm"),
        ("trtllm", "trt-llm"),
    ):
        if needle in low:
            return name
    return None


@dataclass(frozen=True)
class _System:
    stem: str
    gpu_model: str | None
    gpus_per_node: int | None
    nodes: int | None
    fields: dict[str, str]


def _read_system(system: Path) -> _System:
    doc = read_json(system, SYSTEM_WHAT)
    if not isinstance(doc, dict) or not ("system_name" in doc or "accelerator_model_name" in doc):
        raise CardError(
            f"{system}: no system_name or accelerator_model_name: not "
            f"{SYSTEM_WHAT}; give systems/<system>.json of the submission"
        )
    fields = {k: t for k in _SYSTEM_EXTRA if (t := _text(doc.get(k))) is not None}
    return _System(
        stem=system.stem,
        gpu_model=fields.get("accelerator_model_name"),
        gpus_per_node=_count(doc.get("accelerators_per_node")),
        nodes=_count(doc.get("number_of_nodes")),
        fields=fields,
    )
