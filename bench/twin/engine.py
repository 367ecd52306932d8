"""The twin's engine core: a continuous-batching scheduler as a pure discrete-event model.

`TwinScheduler.step()` plans one forward pass the way vLLM's V1 scheduler does (running decodes
first, each costing 1 + num_speculative_tokens of the token budget; then unfinished
prefills; then waiting requests FCFS while blocks and budget last, prefill chunked to the
budget), prices it with the profile and returns its duration and the tokens it emitted.
It never reads a clock or sleeps: the caller owns time, so the same engine runs in real
time behind the HTTP server and in virtual time for calibration.
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from bench.twin.kvcache import BlockHasher, BlockPool
from bench.twin.profile import Profile


@dataclass(eq=False)
class Request:
    rid: str
    prompt_tokens: int
    max_tokens: int
    hashes: list[int]
    num_computed: int = 0
    prefill_target: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    held_hashes: list[int] = field(default_factory=list)
    plain_blocks: int = 0
    running: bool = False
    finished: bool = False
    preemptions: int = 0
    accept_bag: list[int] = field(default_factory=list)
    cap_tokens: int = 0  # tokens the held blocks can store
    drop_per_step: float = 0.0  # accepted drafts this request loses per step (slow ones)
    drop_debt: float = 0.0

    @property
    def prefilling(self) -> bool:
        return self.num_computed < self.prefill_target


ACCEPT_BAG = 20


def _pattern(probs: list[float], size: int) -> list[int]:
    """`size` outcomes (accepted drafts) in the proportions of `probs` (largest remainder)."""
    exact = [p * size for p in probs]
    counts = [int(x) for x in exact]
    by_rest = sorted(range(len(probs)), key=lambda k: exact[k] - counts[k], reverse=True)
    for k in by_rest[: size - sum(counts)]:
        counts[k] += 1
    return [k for k, n in enumerate(counts) for _ in range(n)]


class Emission(NamedTuple):
    request: Request
    tokens: int
    finished: bool


@dataclass
class StepResult:
    duration_s: float
    emissions: list[Emission]
    decode_requests: int
    prefill_tokens: int
    # Requests whose deferred abort (`abort_soon`) took effect at the start of this step.
    aborted: list[Request] = field(default_factory=list)
    # Requests taken from the waiting queue into this step (a preempted one again).
    admitted: list[Request] = field(default_factory=list)


@dataclass
class SchedulerCounters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    preemptions: int = 0
    finished_requests: int = 0


class TwinScheduler:
    def __init__(self, profile: Profile, seed: int = 0) -> None:
        self.profile = profile
        self.pool = BlockPool(profile.num_blocks)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.counters = SchedulerCounters()
        self._rng = random.Random(seed)
        pattern = _pattern(profile.accept_probs, ACCEPT_BAG)
        self._accept_bags = [self._rng.sample(pattern, len(pattern)) for _ in range(256)]
        self._ids = itertools.count()
        self._load_serial = itertools.count()  # the slow-request pattern's position
        self._hasher = BlockHasher(profile.block_size)
        self._abort_due: list[Request] = []

    # -- requests -------------------------------------------------------------------------
    def make_request(self, prompt_ids: list[int], max_tokens: int, rid: str = "") -> Request:
        serial = next(self._ids)
        hashes = self._hasher(prompt_ids)
        cached = self.pool.cached_prefix(hashes) * self.profile.block_size
        if self.idle and cached * 2 < len(prompt_ids):
            # A mostly cold prompt on an idle engine starts a new context row (its prefill
            # scout): the slow-request pattern restarts there, as in the calibrated virtual
            # run (one engine per row), so a row measured again sees the same pattern
            # whatever ran on the server before.
            self._load_serial = itertools.count()
        n = next(self._load_serial)
        frac = self.profile.slow_request_fraction
        slow = int((n + 1) * frac) > int(n * frac)
        return Request(
            rid=rid or f"req-{serial}",
            prompt_tokens=len(prompt_ids),
            max_tokens=max_tokens,
            hashes=hashes,
            drop_per_step=self.profile.slow_drop(len(prompt_ids)) if slow else 0.0,
        )

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def abort(self, req: Request) -> None:
        if req.finished:
            return
        req.finished = True
        if req.running:
            self.running.remove(req)
            self._free(req)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)

    def abort_soon(self, req: Request) -> None:
        """Abort at the start of the next step, the way vLLM's engine core takes an abort
        from its input queue between two steps (the step in flight still runs it)."""
        if not req.finished:
            self._abort_due.append(req)

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def kv_usage(self) -> float:
        return self.pool.used / self.pool.num_blocks

    def reset_prefix_cache(self) -> int:
        return self.pool.reset()

    # -- one step -------------------------------------------------------------------------
    def step(self) -> StepResult:
        aborted = [r for r in self._abort_due if not r.finished]
        self._abort_due = []
        for req in aborted:
            self.abort(req)
        p = self.profile
        spec = p.num_speculative_tokens
        budget = p.max_num_batched_tokens
        decodes, ctx_sum = self._reserve_decodes(1 + spec)
        budget -= len(decodes) * (1 + spec)
        chunks: list[tuple[Request, int]] = []
        admitted: list[Request] = []
        for req in self.running:
            if budget <= 0:
                break
            if req.prefilling:
                n = min(req.prefill_target - req.num_computed, budget)
                chunks.append((req, n))
                budget -= n
        while self.waiting and budget > 0 and len(self.running) < p.max_num_seqs:
            req = self.waiting[0]
            if not self._admit(req):
                break
            self.waiting.popleft()
            admitted.append(req)
            n = min(req.prefill_target - req.num_computed, budget)
            chunks.append((req, n))
            budget -= n

        duration = 0.0
        if decodes:
            duration = p.decode_step_seconds(len(decodes), ctx_sum / len(decodes))
        emissions = self._decode(decodes, spec)
        prefill_tokens = 0
        for req, n in chunks:
            duration += n * p.prefill_seconds_per_token(req.prompt_tokens)
            req.num_computed += n
            prefill_tokens += n
            if not req.prefilling:
                self._register_prompt_blocks(req)
                emissions.append(self._emit(req, 1))
        self.counters.prompt_tokens += prefill_tokens
        return StepResult(duration, emissions, len(decodes), prefill_tokens, aborted, admitted)

    def _decode(self, decodes: list[Request], spec: int) -> list[Emission]:
        """Tokens of one decode step (the hot path: one pass, no per-request calls).

        Accepted drafts are drawn without replacement from shuffled bags that hold the
        profile's distribution exactly, so a request's mean tokens per step converges
        within one bag instead of wandering by a few percent over a 30 s window (a real
        server's acceptance rate is that steady for a given prompt)."""
        emissions: list[Emission] = []
        finished: list[Request] = []
        bags, pick = self._accept_bags, self._rng.randrange
        generated = accepted = 0
        for req in decodes:
            k = 0
            if spec:
                bag = req.accept_bag
                if not bag:
                    bag = req.accept_bag = bags[pick(len(bags))].copy()
                k = bag.pop()
                if req.drop_per_step:
                    req.drop_debt += req.drop_per_step
                    if k and req.drop_debt >= 1.0:
                        k -= 1
                        req.drop_debt -= 1.0
            n = 1 + k
            left = req.max_tokens - req.output_tokens
            done = n >= left
            if done:
                n = left
                finished.append(req)
            req.output_tokens += n
            generated += n
            accepted += k
            emissions.append(Emission(req, n, done))
        c = self.counters
        if spec:
            c.drafts += len(decodes)
            c.draft_tokens += spec * len(decodes)
            c.accepted_tokens += accepted
        c.generation_tokens += generated
        for req in finished:
            self._finish(req)
        return emissions

    def _finish(self, req: Request) -> None:
        req.finished = True
        self.running.remove(req)
        self._free(req)
        self.counters.finished_requests += 1

    def _emit(self, req: Request, tokens: int) -> Emission:
        req.output_tokens += tokens
        self.counters.generation_tokens += tokens
        done = req.output_tokens >= req.max_tokens
        if done:
            self._finish(req)
        return Emission(req, tokens, done)

    def _reserve_decodes(self, lookahead: int) -> tuple[list[Request], int]:
        """Running decodes whose next tokens have blocks, and their total context.

        Blocks are only counted when a request's tokens outgrow what it holds; when the
        pool runs dry, the newest running request is preempted (recomputed later)."""
        bs = self.profile.block_size
        decodes: list[Request] = []
        ctx_sum = 0
        for req in self.running:
            if req.num_computed < req.prefill_target or not req.running:
                continue
            total = req.prompt_tokens + req.output_tokens
            if total + lookahead > req.cap_tokens:
                need = -(-(total + lookahead) // bs)
                have = len(req.held_hashes) + req.plain_blocks
                if not self.pool.allocate(need - have):
                    self._reserve_tight(lookahead)
                    return self._reserve_decodes(lookahead)
                req.plain_blocks += need - have
                req.cap_tokens = need * bs
            decodes.append(req)
            ctx_sum += total
        return decodes, ctx_sum

    def _reserve_tight(self, lookahead: int) -> None:
        """Make room for every running decode, preempting the newest requests."""
        bs = self.profile.block_size
        for req in list(self.running):
            if req.prefilling or not req.running:
                continue
            need = -(-(req.prompt_tokens + req.output_tokens + lookahead) // bs)
            have = len(req.held_hashes) + req.plain_blocks
            while need > have and not self.pool.allocate(need - have):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is req:
                    break
            if req.running and need > have:
                req.plain_blocks += need - have
                req.cap_tokens = need * bs

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self._free(req)
        req.num_computed = 0
        req.preemptions += 1
        self.counters.preemptions += 1
        self.waiting.appendleft(req)

    def _admit(self, req: Request) -> bool:
        p, bs = self.profile, self.profile.block_size
        target = req.prompt_tokens + req.output_tokens
        hit_blocks = self.pool.cached_prefix(req.hashes)
        cached = min(hit_blocks * bs, target - 1)
        recompute = p.warm_recompute(req.prompt_tokens)
        if cached > 0 and recompute > 0:
            cached = max(0, min(cached, target - recompute))
        cached = cached // bs * bs
        hit_blocks = cached // bs
        need = -(-target // bs) - hit_blocks
        # Its own cached blocks, when nobody else holds them, are among the available ones:
        # acquiring them takes them out, so they count against the room too (a preempted
        # request's prompt blocks grew the pool past its size before this). A request larger
        # than the whole pool could then never start: it keeps the old rule and runs over
        # the pool, as it always did (a vLLM whose max_model_len exceeds its KV cache does
        # not start at all; the `tiny` profile has one, for short tests).
        oversized = -(-target // bs) > self.pool.num_blocks
        taken = 0 if oversized else self.pool.evictable_among(req.hashes[:hit_blocks])
        if need + taken > self.pool.available():
            return False
        self.pool.acquire(req.hashes[:hit_blocks])
        self.pool.allocate(need)
        req.held_hashes = list(req.hashes[:hit_blocks])
        req.plain_blocks = need
        req.cap_tokens = (hit_blocks + need) * bs
        req.prefill_target = target
        req.num_computed = cached
        req.cached_tokens = cached
        req.running = True
        self.running.append(req)
        self.counters.prefix_queries += req.prompt_tokens
        self.counters.prefix_hits += min(cached, req.prompt_tokens)
        return True

    def _register_prompt_blocks(self, req: Request) -> None:
        new = req.hashes[len(req.held_hashes) :]
        owned = self.pool.register(new)
        req.held_hashes += owned
        req.plain_blocks -= len(owned)

    def _free(self, req: Request) -> None:
        self.pool.release(req.held_hashes, req.plain_blocks)
        req.held_hashes = []
        req.plain_blocks = 0
        req.cap_tokens = 0
        req.running = False
