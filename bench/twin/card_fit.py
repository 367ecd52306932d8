"""A twin profile fitted to a publisher's card: a simulated server that serves the card's
traffic as fast as the publisher's server did (`bench twin fit CARD.json -o profile.json`).

What the fit is for: rehearsing a reproduction end to end with nothing but this machine
(`make bench CARD=...` on the twin, and the tests), and asking what a verdict would say of a
host some per cent slower (`--slower PCT`). It says nothing about the publisher's hardware:
a fitted twin reproduces the card's figures because it was made to.

How. The card's traffic is the workload `bench card workload` writes
(`bench.publishers.workload.workload_of`), planned exactly as `bench run` plans it
(`bench.workload.schedule.plan_point`, point 0, trial 0: the same arrival times and
lengths) and played through the twin's own engine in virtual time
(`bench.twin.openloop.simulate`: a closed loop of C streams is every request due at 0
under a cap of C, each next send landing at a random point of the server's step, as a live
client's does (`_delays`), its figures the mean over PHASE_SEEDS draws; an open loop keeps
the card's concurrency cap). The records are turned
into `metrics.TimedRequest`s and the card's figures computed from them by the publisher's
definitions (`bench.publishers.metrics.compute`), as a reproduction computes ours.

Two knobs, each a factor on a base profile's costs (`BASE`, the twin's `published` profile:
its step-time shape over batch sizes was fitted to a real card): `decode` scales every
decode step, `prefill` the prefill cost per token and the frontend's per-request times.
Each is moved toward its figures (`_targets`: the decode knob's TPOT, ITL and
interactivity figures, else its first throughput; the prefill knob's TTFT figures), by the
geometric mean of published / simulated over them (damped), until both steps are within
TOLERANCE_PCT; after MAX_ROUNDS the round closest to that is kept, its prefill knob bisected
(TTFT jumps as prompts land before or after a step boundary), and said. MLPerf's
server scenario (tokens a second at an offered rate: a speed that does not move with the
server's) fits on the p99s it publishes (`mlperf_*_p99_ns`), LoadGen's own figures. The
fitted profile has no speculative decoding and no slow requests (a card does not say), and
limits that never bind at the card's point (KV capacity, batch size, model length), since
the publisher's server was sized for it, and a frontend time per prompt that does not
depend on the load (`base_profile`). Run-to-run noise stays
the base's (about 1 % of each figure).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.errors import CardError
from bench.publishers import metrics
from bench.publishers.metrics import TimedRequest
from bench.publishers.model import ComputedAs, PublishedFigure, PublisherCard
from bench.publishers.workload import workload_of
from bench.twin import openloop
from bench.twin import profile as profiles
from bench.twin.openloop import VirtualRequest
from bench.twin.profile import Profile
from bench.workload.schedule import plan_point
from bench.workload_spec import Workload

BASE = "published"
TOLERANCE_PCT = 0.5  # each target within this of published, or MAX_ROUNDS
MAX_ROUNDS = 16
DAMPING = 0.8  # each round moves a knob by (published / simulated) ** DAMPING
PHASE_SEEDS = 4  # a closed loop's figures: the mean over this many draws of the phases
BRACKET = 1.25  # the prefill knob's bisection, around the best round's (`_bisect_prefill`)
BISECTIONS = 12
MAX_SIMULATED_TOKENS = 20_000_000  # input + output of the point: above, refused (minutes)
# Each knob's figures: the decode knob moves by the geometric mean of (published /
# simulated) over the card's TPOT, ITL and interactivity figures (inverted for the
# larger-is-faster ones), or its first throughput figure when it has none of those; the
# prefill knob likewise over its TTFT figures. A mean and a median of one latency pull the
# knob to the middle of the two errors (the twin's spread is not the publisher's).
DECODE_LATENCY: frozenset[str] = frozenset(
    {
        f"{fig}_{stat}_{unit}"
        for fig in ("tpot", "itl")
        for stat in ("mean", "median")
        for unit in ("ms", "s")
    }
    | {"interactivity", "mlperf_tpot_p99_ns"}
)
THROUGHPUT: tuple[ComputedAs, ...] = (
    "output_tok_s", "output_tok_s_per_gpu", "input_output_tok_s_per_gpu", "total_tok_s",
    "mlperf_tokens_per_s",
)  # fmt: skip
PREFILL_LATENCY: frozenset[str] = frozenset(
    {f"ttft_{stat}_{unit}" for stat in ("mean", "median") for unit in ("ms", "s")}
    | {"mlperf_ttft_p99_ns"}
)
FASTER_IS_LARGER = frozenset({"interactivity", *THROUGHPUT})


@dataclass(frozen=True, slots=True)
class FittedFigure:
    name: str
    computed_as: ComputedAs
    published: float
    simulated: float | None

    @property
    def off_pct(self) -> float | None:
        if self.simulated is None or not self.published:
            return None
        return 100.0 * (self.simulated - self.published) / self.published


@dataclass(frozen=True, slots=True)
class TwinFit:
    profile: Profile
    decode: float  # the factors on the base profile's costs
    prefill: float
    rounds: int
    converged: bool
    figures: tuple[FittedFigure, ...]  # every computable figure of the card, simulated
    targets: tuple[str, ...]  # the figures the knobs were fitted to

    def lines(self) -> list[str]:
        state = "converged" if self.converged else f"not within {TOLERANCE_PCT:g} %"
        out = [
            f"fitted after {self.rounds} rounds ({state}): decode x{self.decode:.4g}, "
            f"prefill x{self.prefill:.4g} of the twin's {BASE} profile; "
            f"targets: {', '.join(self.targets)}"
        ]
        width = max((len(f.name) for f in self.figures), default=6)
        for f in self.figures:
            sim = "-" if f.simulated is None else f"{f.simulated:.6g}"
            off = "" if f.off_pct is None else f"  {f.off_pct:+.2f} %"
            out.append(f"  {f.name.ljust(width)}  published {f.published:.6g}  twin {sim}{off}")
        return out


def records_of(requests: Sequence[VirtualRequest]) -> tuple[list[TimedRequest], float]:
    """The simulated requests as our records (server seconds) and the point's duration
    (first send to last end)."""
    out = [
        TimedRequest(
            start_s=r.arrival_s,
            first_token_s=r.first_token_s,
            end_s=r.finish_s,
            input_tokens=r.prompt_tokens,
            output_tokens=r.tokens,
            chunk_s=tuple(t for t, _ in r.chunks),
            chunk_tokens=tuple(n for _, n in r.chunks),
            ok=True,
        )
        for r in requests
        if r.chunks
    ]
    if not out:
        raise CardError("the card's point simulated to no answered request")
    return out, max(r.end_s for r in out) - min(r.start_s for r in out)


def _arrivals(workload: Workload) -> tuple[list[tuple[float, int, int]], int]:
    a = workload.arrivals
    if a.kind == "trace":
        raise CardError("a trace workload cannot be fitted: a card's traffic is never one")
    planned = plan_point(workload, 0, trial=0)
    cap = a.concurrencies[0] if a.kind == "closed-count" else a.max_in_flight
    tokens = sum(p.input_tokens + p.output_tokens for p in planned)
    if tokens > MAX_SIMULATED_TOKENS:
        raise CardError(
            f"the card's point is {tokens:,} tokens: too many to fit a twin to here "
            f"(at most {MAX_SIMULATED_TOKENS:,})"
        )
    return [(p.at_s, p.input_tokens, p.output_tokens) for p in planned], cap


def base_profile(workload: Workload) -> Profile:
    """The base profile with limits that never bind at the workload's point and without
    speculative decoding or slow requests (module docstring)."""
    base = profiles.load(BASE)
    a = workload.arrivals
    planned = plan_point(workload, 0, trial=0)
    longest = max(p.input_tokens + p.output_tokens for p in planned)
    streams = a.concurrencies[0] if a.kind == "closed-count" else (a.max_in_flight or len(planned))
    streams = min(streams, len(planned))
    kv = max(base.kv_capacity_tokens, 2 * streams * longest)
    data = base.model_dump()
    data.update(
        name=f"{BASE}-fitted",
        max_model_len=max(base.max_model_len, longest + 1),
        kv_capacity_tokens=kv,
        reported_num_gpu_blocks=kv // base.block_size,
        max_num_seqs=max(base.max_num_seqs, streams),
        num_speculative_tokens=0,
        accept_probs=[1.0],
        slow_request_fraction=0.0,
        slow_request_drop=None,
        # The frontend's time per prompt without the seed card's dependence on the load
        # (its batch-1 value at every load): that shape was fitted to the seed card's warm
        # TTFTs, and at a load of a few streams it moves by a third from one stream to the
        # next, so a twin fitted through it would hang on how many streams it holds.
        frontend_s=[[row[0]] * len(row) for row in base.frontend_s],
    )
    return Profile.model_validate(data)


def scaled(base: Profile, *, decode: float, prefill: float, name: str | None = None) -> Profile:
    """BASE with its decode steps x `decode` and its prefill and frontend costs x `prefill`."""
    for what, v in (("decode", decode), ("prefill", prefill)):
        if not (math.isfinite(v) and 0.0 < v < 1e6):
            raise ValueError(f"{what} factor {v!r} is not a finite number > 0")
    data = base.model_dump()
    data.update(
        decode_step_s=[[v * decode for v in row] for row in base.decode_step_s],
        prefill_s_per_token=[v * prefill for v in base.prefill_s_per_token],
        request_overhead_s=[v * prefill for v in base.request_overhead_s],
        frontend_s=[[v * prefill for v in row] for row in base.frontend_s],
    )
    if name is not None:
        data["name"] = name
    return Profile.model_validate(data)


def knobbed(base: Profile, *, decode: float, prefill: float, name: str | None = None) -> Profile:
    """BASE at the fit's knobs: decode steps x `decode`; below 1, the prefill and frontend
    costs x `prefill`; above it, those stay the base's and only the per-request overhead
    (which overlaps the engine's steps) grows x `prefill`. A TTFT longer than the base's
    prefill gives comes from waiting before the engine, not from a prefill that would stall
    every running stream (a card whose prompts are stand-ins, shorter than the dataset's,
    would otherwise need one)."""
    p = scaled(base, decode=decode, prefill=min(prefill, 1.0), name=name)
    if prefill <= 1.0:
        return p
    data = p.model_dump()
    data["request_overhead_s"] = [v * prefill for v in p.request_overhead_s]
    return Profile.model_validate(data)


def slower(p: Profile, pct: float) -> Profile:
    """P with every step and per-request cost `pct` per cent longer (a host that much slower)."""
    if not (math.isfinite(pct) and -90.0 < pct < 1000.0):
        raise ValueError(f"slower {pct!r} % is not a finite number in (-90, 1000)")
    f = 1.0 + pct / 100.0
    return scaled(p, decode=f, prefill=f, name=f"{p.name}-slower-{pct:g}pct")


def _delays(
    p: Profile, arrivals: Sequence[tuple[float, int, int]], cap: int, seed: int
) -> list[float]:
    """Each request's send, when it waited for a slot, lands uniformly within one decode
    step at the cap's load after the slot freed (a client's reaction, and the phase a real
    server's step has when the request comes: `openloop.simulate`)."""
    mean_ctx = math.fsum(i + o / 2 for _, i, o in arrivals) / len(arrivals)
    step = p.decode_step_seconds(cap, mean_ctx)
    rng = random.Random(f"card-fit/{seed}")
    return [rng.uniform(0.0, step) for _ in arrivals]


def simulate_figures(
    card: PublisherCard, p: Profile, workload: Workload
) -> dict[str, float | None]:
    """Every figure of CARD with a `computed_as`, computed from P serving the card's point:
    the mean over PHASE_SEEDS draws of the sends' phases when the point is a closed loop
    (or a cap binds), else one simulation."""
    arrivals, cap = _arrivals(workload)
    capped = 0 < cap < len(arrivals)
    runs: list[dict[str, float | None]] = []
    for seed in range(PHASE_SEEDS if capped else 1):
        delays = _delays(p, arrivals, cap, seed) if capped else []
        sim = openloop.simulate(p, arrivals, max_in_flight=cap, send_delays_s=delays)
        recs, duration = records_of(sim)
        runs.append(
            {
                f.name: metrics.compute(
                    f.computed_as, recs, duration_s=duration, gpus=card.gpu_count
                )
                for f in card.figures
                if f.computed_as is not None
            }
        )
    out: dict[str, float | None] = {}
    for name in runs[0]:
        values = [r[name] for r in runs]
        out[name] = (
            None if None in values else math.fsum(v for v in values if v is not None) / len(values)
        )
    return out


def _targets(
    card: PublisherCard,
) -> tuple[tuple[PublishedFigure, ...], tuple[PublishedFigure, ...]]:
    """The figures the decode and the prefill knob are fitted to (module docstring)."""
    usable = [f for f in card.figures if f.computed_as is not None and f.value > 0]
    decode = tuple(f for f in usable if f.computed_as in DECODE_LATENCY)
    if not decode:
        first = next((f for k in THROUGHPUT for f in usable if f.computed_as == k), None)
        decode = () if first is None else (first,)
    return decode, tuple(f for f in usable if f.computed_as in PREFILL_LATENCY)


def _ratio(f: PublishedFigure, sims: Mapping[str, float | None]) -> float | None:
    """How many times the knob must grow for F to be published (None: not simulated)."""
    sim = sims.get(f.name)
    if sim is None or sim <= 0:
        return None
    return sim / f.value if f.computed_as in FASTER_IS_LARGER else f.value / sim


def _step(figures: Sequence[PublishedFigure], sims: Mapping[str, float | None]) -> float:
    """The factor that moves a knob toward its figures: the geometric mean of their ratios
    (1: no figure, or none simulated)."""
    ratios = [r for r in (_ratio(f, sims) for f in figures) if r is not None]
    if not ratios:
        return 1.0
    return math.exp(math.fsum(math.log(r) for r in ratios) / len(ratios))


def _bisect_prefill(
    card: PublisherCard,
    *,
    workload: Workload,
    base: Profile,
    decode: float,
    prefill: float,
    figures: Sequence[PublishedFigure],
) -> float:
    """The prefill knob in [prefill / BRACKET, prefill x BRACKET] where the geometric mean
    of FIGURES' errors changes sign (or its nearer end), in BISECTIONS halvings (log scale)."""

    def err(k: float) -> float:
        sims = simulate_figures(card, knobbed(base, decode=decode, prefill=k), workload)
        return math.log(_step(figures, sims))  # > 0: the knob must grow

    lo, hi = prefill / BRACKET, prefill * BRACKET
    e_lo, e_hi = err(lo), err(hi)
    if e_lo <= 0.0:  # even the smallest is too slow
        return lo
    if e_hi >= 0.0:  # even the largest is too fast
        return hi
    for _ in range(BISECTIONS):
        mid = math.sqrt(lo * hi)
        e = err(mid)
        if e > 0.0:
            lo, e_lo = mid, e
        else:
            hi, e_hi = mid, e
    return lo if abs(e_lo) <= abs(e_hi) else hi


def fit(card: PublisherCard) -> TwinFit:
    """The twin profile that serves CARD's point with its figures (module docstring).
    CardError (one line) when the card's traffic cannot be written as a workload or
    simulated, or the card has no figure to fit to."""
    workload = workload_of(card)
    decode_f, prefill_f = _targets(card)
    if not decode_f and not prefill_f:
        raise CardError(
            f"{card.publisher} card '{card.point_id}': no TPOT, ITL, interactivity, "
            "throughput or TTFT figure we compute: nothing to fit a twin to"
        )
    base = base_profile(workload)
    decode = prefill = 1.0
    best: tuple[float, float, float, dict[str, float | None]] | None = None
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        sims = simulate_figures(card, knobbed(base, decode=decode, prefill=prefill), workload)
        sd, sp = _step(decode_f, sims), _step(prefill_f, sims)
        worst = max(abs(s - 1.0) for s in (sd, sp)) * 100.0
        if best is None or worst < best[0]:
            best = (worst, decode, prefill, sims)
        if worst <= TOLERANCE_PCT:
            break
        # Damped: a median can jump between the modes of a bimodal TTFT (a prompt that
        # waits for a step in flight, or not); the best round is kept either way.
        decode *= sd**DAMPING
        prefill *= sp**DAMPING
    assert best is not None
    worst, decode, prefill, sims = best
    if worst > TOLERANCE_PCT and prefill_f:
        # TTFT jumps with the knob (a prompt lands before or after a step boundary), so the
        # multiplicative rounds can circle a target they never hit: bisect the prefill knob
        # on the side its figures err, at the best round's decode knob.
        prefill = _bisect_prefill(
            card, workload=workload, base=base, decode=decode, prefill=prefill, figures=prefill_f
        )
        sims = simulate_figures(card, knobbed(base, decode=decode, prefill=prefill), workload)
        worst = max(abs(s - 1.0) for s in (_step(decode_f, sims), _step(prefill_f, sims))) * 100
    fitted = knobbed(base, decode=decode, prefill=prefill, name=f"fitted-{card.publisher}")
    converged = worst <= TOLERANCE_PCT
    figures = tuple(
        FittedFigure(f.name, f.computed_as, f.value, sims.get(f.name))
        for f in card.figures
        if f.computed_as is not None
    )
    targets = tuple(f.name for f in (*decode_f, *prefill_f))
    return TwinFit(fitted, decode, prefill, rounds, converged, figures, targets)
