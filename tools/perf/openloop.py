"""Open loop: our schedule lateness, and tokens per client CPU-second beside `vllm bench serve`.

One perf streamer (paced: a token every 10 ms per stream, one token a chunk) on the server
core serves both clients, one after the other, on the client core. Per offered Poisson rate
and pass, each client sends the same count of requests of the same lengths (input, output
fixed; ignore_eos):

- ours: `bench run --workload FILE --no-fingerprint`, a one-point workload (poisson at the
  rate), the whole `bench run` process as it ships;
- vLLM's: `vllm bench serve --dataset-name random --request-rate R --burstiness 1
  --num-prompts N` (no concurrency cap), in the resident driver of tools/perf/vllm_driver.py.

Which goes first alternates by pass and rate. While a client runs the harness samples the
streamer's counters and the client's CPU time every 0.1 s (tools.perf.client_capacity), and
takes the same window as the closed-loop comparison: between 5 % and 95 % of the tokens the
streamer sent during that client's run. DEFINITIONS says what every figure is; it is
written into perf.json and printed under the table.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.perf import procs
from tools.perf.client_capacity import POLL_S, Sample, VllmBench, sample, window

INTERVAL_MS = 10.0  # the streamer's pace: one chunk per stream per tick
TOKENS_PER_CHUNK = 1
LATENESS_TARGET_S = 0.001  # our schedule lateness p99, at every offered rate up to ...
LATENESS_UP_TO_RATE = 100.0  # ... this many requests a second
RATIO_TARGET = 2.0  # ours ÷ vLLM's tokens per client CPU-second, at every rate

DEFINITIONS = {
    "schedule_lateness": (
        "ours only: per request, the time our client dispatched it minus the time its "
        "schedule said it was due (bench.workload.runner: dispatched - due, client clock); "
        "p50/p99 over the point's requests, from results.json's `lateness`. `vllm bench "
        "serve` keeps no record of when each request was due, so it has none."
    ),
    "client_cpu_s": (
        "user + system CPU seconds (utime + stime of /proc/PID/stat) of the client process "
        "and its live descendants, sampled every 0.1 s: the whole `bench run --workload` "
        "process for ours; the resident driver process that runs vLLM's own `vllm bench "
        "serve` main for vLLM's. Counted only over the window: from 5 % to 95 % of the tokens "
        "the streamer sent during that client's run, so start-up, imports, prompt building, "
        "the first requests and the tail are left out alike for both."
    ),
    "tokens_per_cpu_s": (
        "tokens the streamer sent in the window ÷ the client's CPU seconds in the window"
    ),
    "ratio": (
        "ours ÷ vLLM's tokens per client CPU-second, taken within each pass (the two ran "
        "back to back against the same streamer), then the median over passes"
    ),
    "achieved_rate": (
        "completed requests a second: ours completed ÷ (first send to last end), "
        "results.json's `achieved_rate`; vLLM's completed ÷ its benchmark duration"
    ),
    "output_tokens": (
        "output tokens the client counted: ours usage completion tokens of completed "
        "requests; vLLM's `total_output_tokens`"
    ),
    "tokens_per_s": "tokens the streamer sent a second in the window",
    "client_core_share": "client CPU seconds ÷ wall seconds in the window",
}


@dataclass(frozen=True)
class OpenLoopPlan:
    """The offered rates, how many requests a point, the lengths and the passes."""

    rates: tuple[float, ...]
    min_requests: int  # at least this many requests a point ...
    min_seconds: float  # ... and at least this many seconds of arrivals
    lengths: tuple[int, int]  # input, output tokens
    passes: int

    def requests(self, rate: float) -> int:
        return max(self.min_requests, math.ceil(rate * self.min_seconds))


FULL = OpenLoopPlan((25.0, 50.0, 100.0), 1000, 20.0, (16, 128), 3)
QUICK = OpenLoopPlan((10.0, 20.0), 40, 0.0, (16, 32), 1)


def workload_toml(rate: float, requests: int, lengths: tuple[int, int], seed: int) -> str:
    """A one-point workload: `requests` Poisson arrivals at `rate`, fixed lengths."""
    return "\n".join(
        [
            f'name = "perf-openloop-{rate:g}"',
            f"seed = {seed}",
            "[arrivals]",
            'kind = "rate"',
            f"rates = [{rate!r}]",
            'process = "poisson"',
            f"requests = {requests}",
            "[lengths]",
            f"input_tokens = {lengths[0]}",
            f"output_tokens = {lengths[1]}",
            "range_ratio = 0",
            "ignore_eos = true",
            "",
        ]
    )


def _watch(url: str, pid: int, server_pid: int, alive: Callable[[], bool]) -> list[Sample]:
    """Samples every POLL_S while `alive()`, and one after."""
    samples: list[Sample] = []
    while True:
        running = alive()
        t, tok, chunks, ccpu, scpu = sample(url, pid, server_pid)
        if samples:  # a process that has exited reads 0: keep its last reading
            ccpu, scpu = max(ccpu, samples[-1][3]), max(scpu, samples[-1][4])
        samples.append((t, tok, chunks, ccpu, scpu))
        if not running:
            return samples
        time.sleep(POLL_S)


def _ours(
    url: str,
    server_pid: int,
    rate: float,
    plan: OpenLoopPlan,
    *,
    seed: int,
    tmp: Path,
    client_cpu: int | None,
) -> dict[str, Any]:
    name = f"ours-{rate:g}-{seed}"
    toml = tmp / f"{name}.toml"
    toml.write_text(workload_toml(rate, plan.requests(rate), plan.lengths, seed))
    rundir, log = tmp / name, tmp / f"{name}.log"
    argv = [procs.python(), "-m", "bench", "run", "--url", url, "--workload", str(toml)]
    argv += ["--out", str(rundir), "--no-fingerprint"]
    before = procs.get_json(url + "/perf/stats")["tokens"]
    with log.open("w") as err:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=procs.child_env(),
            preexec_fn=procs.pin(client_cpu),  # noqa: PLW1509 - affinity only
        )
        try:
            samples = _watch(url, proc.pid, server_pid, lambda: proc.poll() is None)
        finally:
            if proc.poll() is None:
                proc.kill()
            rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"bench run exited with {rc}: {log.read_text()[-2000:]}")
    sent = procs.get_json(url + "/perf/stats")["tokens"] - before
    point = json.loads((rundir / "results.json").read_text())["workload"]["points"][0]
    return ours_figures(point, window(samples), sent)


def ours_figures(point: dict[str, Any], win: dict[str, Any], sent: int) -> dict[str, Any]:
    """Our figures from results.json's point and the window's rates."""
    late = point.get("lateness") or {}
    return win | {
        "client": "bench",
        "status": point["status"],
        "requests": point["requests"],
        "completed": point["completed"],
        "errors": point["requests"] - point["completed"],
        "achieved_rate": point["achieved_rate"],
        "sent_rate": point.get("sent_rate"),
        "output_tokens": point["output_tokens"],
        "tokens_sent": sent,
        "lateness_p50_s": late.get("p50"),
        "lateness_p99_s": late.get("p99"),
        "lateness_max_s": late.get("max"),
        "lateness_n": late.get("n", 0),
    }


def _theirs(
    vllm: VllmBench,
    url: str,
    server_pid: int,
    rate: float,
    plan: OpenLoopPlan,
    *,
    seed: int,
    tmp: Path,
) -> dict[str, Any]:
    before = procs.get_json(url + "/perf/stats")["tokens"]
    n = plan.requests(rate)
    vllm.start_open(url, rate, n, plan.lengths, str(tmp), seed=seed)
    samples = _watch(url, vllm.proc.pid, server_pid, lambda: vllm.running)
    res = vllm.result()
    sent = procs.get_json(url + "/perf/stats")["tokens"] - before
    return vllm_figures(res, n, window(samples), sent)


def vllm_figures(
    res: dict[str, Any], requests: int, win: dict[str, Any], sent: int
) -> dict[str, Any]:
    """vLLM's figures from its result and the window's rates."""
    completed, duration = res["completed"], res["duration"]
    return win | {
        "client": "vllm",
        "requests": requests,
        "completed": completed,
        "errors": res["failed"],
        "achieved_rate": completed / duration if duration else None,
        "output_tokens": res["total_output_tokens"],
        "tokens_sent": sent,
    }


def run(
    plan: OpenLoopPlan,
    server_cpu: int | None,
    client_cpu: int | None,
    vllm: VllmBench | None,
) -> dict[str, Any]:
    """Every rate, every pass, both clients against one streamer (module docstring)."""
    clients = ["bench", "vllm"] if vllm is not None else ["bench"]
    streamer = [procs.python(), "-m", "tools.perf.streamer", "--port", "0"]
    streamer += ["--interval-ms", repr(INTERVAL_MS), "--tokens-per-chunk", str(TOKENS_PER_CHUNK)]
    per: dict[tuple[float, str], list[dict[str, Any]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="perf-openloop-") as d,
        procs.serving(streamer, server_cpu) as (url, server_pid),
    ):
        tmp = Path(d)
        for n in range(plan.passes):
            for i, rate in enumerate(plan.rates):
                got: dict[str, dict[str, Any]] = {}
                for c in clients if (n + i) % 2 == 0 else reversed(clients):
                    if c == "bench":
                        got[c] = _ours(
                            url, server_pid, rate, plan, seed=n, tmp=tmp, client_cpu=client_cpu
                        )
                    else:
                        assert vllm is not None
                        got[c] = _theirs(vllm, url, server_pid, rate, plan, seed=n, tmp=tmp)
                    per.setdefault((rate, c), []).append(got[c])
                print(f"perf: openloop pass {n + 1} {rate:g} req/s: " + brief(got), flush=True)
    return summarize(plan, per, clients)


def brief(got: dict[str, dict[str, Any]]) -> str:
    parts = []
    for c, f in got.items():
        text = f"{c} {f['tokens_per_cpu_s'] or 0:,.0f} tok/CPU-s"
        if f.get("lateness_p99_s") is not None:
            text += f", lateness p99 {f['lateness_p99_s'] * 1000:.3f} ms"
        parts.append(text)
    return "; ".join(parts)


MEDIAN_KEYS = (
    "tokens_per_cpu_s",
    "tokens_per_s",
    "client_core_share",
    "server_core_share",
    "achieved_rate",
    "sent_rate",
    "output_tokens",
    "tokens_sent",
    "lateness_p50_s",
    "lateness_p99_s",
)


def median_figures(figs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over passes (None where no pass has it), the errors summed, the
    worst lateness p99, each pass's point status (ours), and the passes themselves."""
    med: dict[str, Any] = {}
    for k in MEDIAN_KEYS:
        known = [f[k] for f in figs if f.get(k) is not None]
        med[k] = statistics.median(known) if known else None
    worst = [f["lateness_p99_s"] for f in figs if f.get("lateness_p99_s") is not None]
    med["lateness_p99_worst_s"] = max(worst) if worst else None
    med["errors"] = sum(f["errors"] for f in figs)
    med["statuses"] = [f["status"] for f in figs if "status" in f]  # ours: bench's verdict
    med["passes"] = list(figs)
    return med


def ratios(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> list[float]:
    """Ours ÷ vLLM's tokens per client CPU-second, pass by pass (a pass with either one
    unmeasured, too little CPU time to see, is left out)."""
    out = []
    for a, b in zip(ours, theirs, strict=False):
        x, y = a.get("tokens_per_cpu_s"), b.get("tokens_per_cpu_s")
        if x and y:
            out.append(x / y)
    return out


def summarize(
    plan: OpenLoopPlan,
    per: dict[tuple[float, str], list[dict[str, Any]]],
    clients: Sequence[str],
) -> dict[str, Any]:
    rows = []
    for rate in plan.rates:
        row: dict[str, Any] = {"offered_rate": rate, "requests": plan.requests(rate)}
        for c in clients:
            figs = per.get((rate, c))
            if figs:
                row[c] = median_figures(figs)
        passes = ratios(per.get((rate, "bench"), []), per.get((rate, "vllm"), []))
        row["ratio_tokens_per_cpu_s"] = statistics.median(passes) if passes else None
        row["ratio_passes"] = passes
        rows.append(row)
    return {
        "settings": {
            "rates": list(plan.rates),
            "min_requests": plan.min_requests,
            "min_seconds": plan.min_seconds,
            "input_tokens": plan.lengths[0],
            "output_tokens": plan.lengths[1],
            "passes": plan.passes,
            "arrivals": "poisson",
            "streamer_interval_ms": INTERVAL_MS,
            "streamer_tokens_per_chunk": TOKENS_PER_CHUNK,
        },
        "definitions": DEFINITIONS,
        "rows": rows,
        "targets": targets(rows),
    }


def targets(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The two targets judged: our lateness p99 in every pass at every rate up to
    LATENESS_UP_TO_RATE, and the median ratio at every rate. `met` is None when nothing
    was measured (no rate in range, or no vLLM)."""
    late = [
        p["lateness_p99_s"]
        for row in rows
        if row["offered_rate"] <= LATENESS_UP_TO_RATE and "bench" in row
        for p in row["bench"]["passes"]
    ]
    measured_late = [x for x in late if x is not None]
    worst = max(measured_late) if measured_late else None
    if late and len(measured_late) < len(late):
        late_met: bool | None = False  # a point without lateness figures cannot meet it
    else:
        late_met = None if worst is None else worst <= LATENESS_TARGET_S
    rs = [row["ratio_tokens_per_cpu_s"] for row in rows]
    known = [r for r in rs if r is not None]
    lowest = min(known) if known else None
    if not known:
        ratio_met: bool | None = None
    else:
        ratio_met = len(known) == len(rs) and lowest is not None and lowest >= RATIO_TARGET
    return {
        "lateness_p99": {
            "target_s": LATENESS_TARGET_S,
            "up_to_rate": LATENESS_UP_TO_RATE,
            "rule": "the worst p99 over every pass at every offered rate up to the bound",
            "worst_s": worst,
            "met": late_met,
        },
        "tokens_per_cpu_s_ratio": {
            "target": RATIO_TARGET,
            "rule": "the lowest, over offered rates, of the median over passes",
            "lowest": lowest,
            "met": ratio_met,
        },
    }
