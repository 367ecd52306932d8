"""Client capacity: tokens and chunks per client CPU-second, ours beside `vllm bench serve`.

Per regime both clients run at the same time, each against its own streamer (streamers
on the server core, clients on the client core), so both see the same machine. While
they run the harness samples, every 0.1 s, each server's counters (tokens and chunks
sent) and each client's and server's CPU time. The window is the part of the run between
5 % and 95 % of the tokens sent, so start-up, ramp and the tail are excluded the same way
for both clients. Tokens counted ÷ tokens sent compares the client's own total (usage on
every chunk for ours; `total_output_tokens` for vLLM's) with the server's counter.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.perf import procs

POLL_S = 0.1
SATURATED = 0.85  # a process using this share of its core (or more) is the limit


@dataclass(frozen=True)
class Regime:
    name: str
    streams: int
    interval_ms: float  # 0: unpaced
    tokens_per_chunk: int
    max_tokens: int

    @property
    def target_tokens_per_s(self) -> float | None:
        if self.interval_ms <= 0:
            return None
        return self.streams * self.tokens_per_chunk * 1000.0 / self.interval_ms


# Output lengths keep each run to several seconds: enough CPU time for 10 ms ticks, and long
# enough that the two clients, started together, overlap for nearly all of it (vLLM's takes
# a moment to build its prompts first; with ~1 s unpaced runs its ratio swung 0.5-2x).
FULL = (
    Regime("128 paced 10 ms", 128, 10.0, 1, 512),
    Regime("128 unpaced", 128, 0.0, 1, 4096),
    Regime("128 unpaced, 4 tokens/chunk", 128, 0.0, 4, 8192),
    Regime("1024 paced 10 ms", 1024, 10.0, 1, 256),
    Regime("1024 unpaced", 1024, 0.0, 1, 512),
)
# Enough tokens for the client to use ~20+ CPU ticks (10 ms each) even on an idle machine.
QUICK = (Regime("32 paced 10 ms", 32, 10.0, 1, 300), Regime("8 unpaced", 8, 0.0, 1, 16000))


class VllmBench:
    """One resident `vllm bench serve` driver (vLLM's imports cost a minute here)."""

    def __init__(self, tokenizer: Path, cpu: int | None) -> None:
        driver = Path(__file__).with_name("vllm_driver.py")
        self.tokenizer = tokenizer
        self.proc = subprocess.Popen(
            [str(procs.vllm_python()), str(driver)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=procs.pin(cpu),  # noqa: PLW1509 - affinity only
        )
        self._read_until("READY")
        self._result: dict[str, Any] | None = None
        self._finished = threading.Event()

    def _read_until(self, prefix: str) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise RuntimeError(f"vllm bench serve driver exited with {self.proc.wait()}")

    def _common(self, url: str, model: str, output_len: int, prompts: int) -> list[str]:
        return [
            *("--backend", "openai-chat", "--base-url", url),
            *("--endpoint", "/v1/chat/completions", "--model", model),
            *("--tokenizer", str(self.tokenizer), "--dataset-name", "random"),
            *("--random-output-len", str(output_len), "--random-range-ratio", "0"),
            *("--ignore-eos", "--num-prompts", str(prompts), "--num-warmups", "0"),
            *("--ready-check-timeout-sec", "0", "--disable-tqdm", "--save-detailed"),
        ]

    def start(self, url: str, r: Regime, result_dir: str, model: str = "perf") -> None:
        """C streams (`--max-concurrency`), every request sent at once."""
        argv = self._common(url, model, r.max_tokens, r.streams)
        argv += ["--random-input-len", "16", "--max-concurrency", str(r.streams)]
        self._submit([*argv, "--result-dir", result_dir, "--seed", "0"])

    def start_open(
        self,
        url: str,
        rate: float,
        prompts: int,
        lengths: tuple[int, int],
        result_dir: str,
        *,
        model: str = "perf",
        seed: int = 0,
    ) -> None:
        """An open loop: `prompts` requests at Poisson `rate` a second (burstiness 1), no
        concurrency cap; lengths (input, output) fixed."""
        argv = self._common(url, model, lengths[1], prompts)
        argv += ["--random-input-len", str(lengths[0])]
        argv += ["--request-rate", repr(rate), "--burstiness", "1"]
        self._submit([*argv, "--result-dir", result_dir, "--seed", str(seed)])

    def _submit(self, argv: list[str]) -> None:
        assert self.proc.stdin is not None
        self._finished.clear()
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        threading.Thread(target=self._wait_result, daemon=True).start()

    def _wait_result(self) -> None:
        try:
            self._result = json.loads(self._read_until("RESULT "))
        finally:
            self._finished.set()

    @property
    def running(self) -> bool:
        return not self._finished.is_set()

    def result(self) -> dict[str, Any]:
        self._finished.wait()
        if self._result is None:
            raise RuntimeError("vllm bench serve driver ended without a result")
        return self._result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        procs.stop(self.proc)


Sample = tuple[float, int, int, float, float]  # monotonic s, tokens, chunks, client/server CPU s


def sample(url: str, client_pid: int, server_pid: int) -> Sample:
    """The streamer's counters and both processes' CPU seconds, now."""
    st = procs.get_json(url + "/perf/stats")
    return (
        time.monotonic(),
        st["tokens"],
        st["chunks"],
        procs.cpu_s(client_pid),
        procs.cpu_s(server_pid),
    )


def window(samples: list[Sample]) -> dict[str, Any]:
    """Rates over the samples between 5 % and 95 % of the tokens sent (all of them when
    fewer than 3 fall inside): tokens and chunks per client CPU-second, core shares."""
    t0_tok, t1_tok = samples[0][1], samples[-1][1]
    total = t1_tok - t0_tok
    lo, hi = t0_tok + 0.05 * total, t0_tok + 0.95 * total
    inside = [s for s in samples if lo <= s[1] <= hi]
    if len(inside) < 3:
        inside = samples
    a, b = inside[0], inside[-1]
    wall, tok, chunks = b[0] - a[0], b[1] - a[1], b[2] - a[2]
    ccpu, scpu = b[3] - a[3], b[4] - a[4]
    return {
        "window_s": wall,
        "tokens_per_s": tok / wall if wall > 0 else None,
        "tokens_per_cpu_s": tok / ccpu if ccpu > 0 else None,
        "chunks_per_cpu_s": chunks / ccpu if ccpu > 0 else None,
        "client_core_share": ccpu / wall if wall > 0 else None,
        "server_core_share": scpu / wall if wall > 0 else None,
    }


def run_side_by_side(
    regime: Regime,
    servers: dict[str, tuple[str, int]],
    *,
    client_cpu: int | None,
    vllm: VllmBench | None,
) -> dict[str, dict[str, Any]]:
    """Run every client at once, each against its own streamer, all on the client core.

    On a shared machine whatever else runs (and the clock speed) changes from one minute
    to the next; clients measured at the same time on the same core see the same machine.
    """
    url = {c: u for c, (u, _) in servers.items()}
    before = {c: procs.get_json(u + "/perf/stats")["tokens"] for c, u in url.items()}
    with tempfile.TemporaryDirectory(prefix="perf-") as tmp:
        out = Path(tmp) / "loadgen.json"
        proc: subprocess.Popen[str] | None = None
        pid: dict[str, int] = {}
        for c, u in url.items():
            if c == "bench":
                argv = [procs.python(), "-m", "tools.perf.loadgen", "--url", u, "--model", "perf"]
                argv += ["--streams", str(regime.streams), "--max-tokens", str(regime.max_tokens)]
                argv += ["--out", str(out)]
                proc = subprocess.Popen(argv, text=True, preexec_fn=procs.pin(client_cpu))  # noqa: PLW1509
                pid[c] = proc.pid
            else:
                assert vllm is not None
                vllm.start(u, regime, tmp)
                pid[c] = vllm.proc.pid

        def alive(c: str) -> bool:
            if c == "bench":
                return proc is not None and proc.poll() is None
            return vllm is not None and vllm.running

        samples: dict[str, list[Sample]] = {c: [] for c in url}
        while True:
            live = [c for c in url if alive(c)]
            for c, u in url.items():
                t, tok, chunks, ccpu, scpu = sample(u, pid[c], servers[c][1])
                if samples[c]:  # a process that has exited reads 0: keep its last reading
                    ccpu, scpu = max(ccpu, samples[c][-1][3]), max(scpu, samples[c][-1][4])
                samples[c].append((t, tok, chunks, ccpu, scpu))
            if not live:
                break
            time.sleep(POLL_S)
        figs: dict[str, dict[str, Any]] = {}
        for c in url:
            if c == "bench":
                got = json.loads(out.read_text())
                counted, errors = got["tokens"], got["errors"]
            else:
                assert vllm is not None
                res = vllm.result()
                counted, errors = res["total_output_tokens"], res["failed"]
            sent = procs.get_json(url[c] + "/perf/stats")["tokens"] - before[c]
            fig = window(samples[c])
            fig.update(client=c, tokens_sent=sent, tokens_counted=counted, errors=errors)
            fig["counted_over_sent"] = counted / sent if sent else None
            figs[c] = fig
    return figs


def limit(fig: dict[str, Any], regime: Regime) -> str:
    """Who held the rate back: 'pacing' (on target), 'server', 'client' or 'machine'."""
    target = regime.target_tokens_per_s
    rate = fig["tokens_per_s"] or 0.0
    if target is not None and rate >= 0.97 * target:
        return "pacing"
    if (fig["server_core_share"] or 0.0) >= SATURATED:
        return "server"
    if (fig["client_core_share"] or 0.0) >= SATURATED:
        return "client"
    return "machine"  # neither core saturated: other work on the machine took the time
