"""/metrics in Prometheus text format: the families of the flavor's engine (vLLM's `vllm:`
here; bench.twin.flavors for SGLang and llama.cpp) and the twin's own `twin:` lines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.twin import flavors
from bench.twin.engine import TwinScheduler

Metric = Callable[..., None]  # metric(name, kind, value, labels=..., help_=...)


@dataclass
class StepLag:
    """How late the real-time loop finishes steps against the profile's schedule."""

    steps: int = 0
    lag_s_sum: float = 0.0
    step_s_sum: float = 0.0
    lag_s_max: float = 0.0
    deferred: int = 0  # steps whose chunks were merged into the next write
    busy_s: float = 0.0  # loop time spent planning steps and writing chunks

    def record(self, lag_s: float, step_s: float) -> None:
        self.steps += 1
        self.lag_s_sum += lag_s
        self.step_s_sum += step_s
        self.lag_s_max = max(self.lag_s_max, lag_s)

    @property
    def fraction(self) -> float:
        return self.lag_s_sum / self.step_s_sum if self.step_s_sum > 0 else 0.0


def render(
    engine: TwinScheduler,
    lag: StepLag,
    speed: float,
    requests_total: int,
    flavor: flavors.Flavor = "vllm",
) -> str:
    p = engine.profile
    lab = f'engine="0",model_name="{p.model}"'
    lines: list[str] = []

    def metric(name: str, kind: str, value: float, labels: str = lab, help_: str = "") -> None:
        lines.append(f"# HELP {name} {help_ or name}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{{{labels}}} {float(value)!r}")

    if flavor == "sglang":
        lines += flavors.render_sglang(engine)
    elif flavor == "llamacpp":
        lines += flavors.render_llamacpp(engine)
    else:
        _vllm(engine, metric)
    _twin(p.name, lag, speed, requests_total, metric)
    return "\n".join(lines) + "\n"


def _vllm(engine: TwinScheduler, metric: Metric) -> None:
    p, c = engine.profile, engine.counters
    lab = f'engine="0",model_name="{p.model}"'
    metric(
        "vllm:num_requests_running",
        "gauge",
        len(engine.running),
        help_="Number of requests in model execution batches.",
    )
    metric(
        "vllm:num_requests_waiting",
        "gauge",
        len(engine.waiting),
        help_="Number of requests waiting to be processed.",
    )
    metric(
        "vllm:kv_cache_usage_perc",
        "gauge",
        engine.kv_usage(),
        help_="KV-cache usage. 1 means 100 percent usage.",
    )
    metric("vllm:prompt_tokens_total", "counter", c.prompt_tokens)
    metric("vllm:generation_tokens_total", "counter", c.generation_tokens)
    metric("vllm:prefix_cache_queries_total", "counter", c.prefix_queries)
    metric("vllm:prefix_cache_hits_total", "counter", c.prefix_hits)
    metric("vllm:num_preemptions_total", "counter", c.preemptions)
    metric(
        "vllm:request_success_total",
        "counter",
        c.finished_requests,
        labels=lab + ',finished_reason="length"',
    )
    if p.num_speculative_tokens:
        metric("vllm:spec_decode_num_drafts_total", "counter", c.drafts)
        metric("vllm:spec_decode_num_draft_tokens_total", "counter", c.draft_tokens)
        metric("vllm:spec_decode_num_accepted_tokens_total", "counter", c.accepted_tokens)
    info = (
        f'block_size="{p.block_size}",cache_dtype="auto",enable_prefix_caching="True",'
        f'kv_cache_size_tokens="{p.kv_capacity_tokens}",'
        f'num_gpu_blocks="{p.reported_num_gpu_blocks}",engine="0"'
    )
    metric(
        "vllm:cache_config_info",
        "gauge",
        1.0,
        labels=info,
        help_="Information of the LLMEngine CacheConfig",
    )


def _twin(profile: str, lag: StepLag, speed: float, requests_total: int, metric: Metric) -> None:
    tw = f'profile="{profile}"'
    metric("twin:speed_factor", "gauge", speed, labels=tw)
    metric("twin:requests_total", "counter", requests_total, labels=tw)
    metric("twin:steps_total", "counter", lag.steps, labels=tw)
    metric(
        "twin:step_lag_seconds_sum",
        "counter",
        lag.lag_s_sum,
        labels=tw,
        help_="Lateness of step completions against the profile schedule (real seconds).",
    )
    metric(
        "twin:step_seconds_sum",
        "counter",
        lag.step_s_sum,
        labels=tw,
        help_="Scheduled step time (real seconds, after the speed factor).",
    )
    metric("twin:step_lag_max_seconds", "gauge", lag.lag_s_max, labels=tw)
    metric(
        "twin:step_busy_seconds_sum",
        "counter",
        lag.busy_s,
        labels=tw,
        help_="Time the loop spent on its own work (planning, writing); the rest it slept.",
    )
    metric(
        "twin:deferred_writes_total",
        "counter",
        lag.deferred,
        labels=tw,
        help_="Steps whose chunks were held and merged into the next write (overload).",
    )
    metric(
        "twin:step_lag_fraction",
        "gauge",
        lag.fraction,
        labels=tw,
        help_="step_lag_seconds_sum / step_seconds_sum; the twin keeps up while this is small.",
    )
