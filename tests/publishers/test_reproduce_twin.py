"""A publisher's card reproduced as a user runs it, against the real twin over HTTP:
`bench card import --from vllm-dashboard`, `bench card workload`, `bench run --workload`,
then `bench reproduce RUN --card CARD.json`.

The card's traffic is the vLLM dashboard fixture's with fewer, shorter requests (a test's
budget); its published figures are then set to what the run measured, computed by the
publisher's definitions from the run's own samples, so the same run must reproduce them,
and the figures made 10 % better than measured must not be (a twin fitted to a published
card is the next step: docs/cards.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import run_files
from bench.errors import Exit
from bench.publishers import metrics
from bench.publishers.model import PublisherCard
from bench.publishers.run_trials import trials_of
from tests.support import procs
from tests.support.priority import prioritize
from tests.support.twinproc import start_twin

# timed: the run's 40 requests at 40/s judge our client's lateness (p99 over 40 is the latest
# one, and over 10 ms the trial is left out); beside the suite's vLLM server, whose processes
# run at the same niceness as the twin and the client here, one request went 22 ms late
# (a fresh clone's make test, 7 December) and nothing was judged. In the vllm group no vLLM
# server runs beside it (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.timed, pytest.mark.timeout(300)]

DATA = Path(__file__).resolve().parents[1] / "data" / "publishers" / "vllm-dashboard"
RANDOM = DATA / "serving_qwen3_8b_tp1_random_in1k_out2k_qps_10_concurrency_200.json"
SPEED = 10.0


def _bench(*args: str, timeout_s: float = 120) -> tuple[int, str, str]:
    proc = procs.bench(*args, mark=procs.new_mark())
    prioritize(proc.pid)
    return procs.finish(proc, timeout_s=timeout_s)


def _with_figures(card: PublisherCard, values: dict[str, float]) -> PublisherCard:
    figures = tuple(
        f.model_copy(update={"value": values[f.name]}) if f.name in values else f
        for f in card.figures
    )
    return card.model_copy(update={"figures": figures})


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, PublisherCard]:
    base = tmp_path_factory.mktemp("publisher-twin")
    imported = base / "imported.json"
    rc, _, err = _bench(
        "card", "import", "--from", "vllm-dashboard", str(RANDOM), "-o", str(imported)
    )
    assert rc == 0, err[-2000:]
    card = PublisherCard.model_validate_json(imported.read_text())
    small = card.workload.model_copy(
        update={"num_prompts": 40, "input_tokens": 128, "output_tokens": 32, "request_rate": 4.0}
    )
    card = card.model_copy(update={"workload": small})
    card_path = base / "card.json"
    card_path.write_text(card.model_dump_json(indent=2))
    spec = base / "card.toml"
    rc, _, err = _bench("card", "workload", str(card_path), "-o", str(spec))
    assert rc == 0, err[-2000:]
    assert "note: " in err  # what differs from the publisher's traffic is said
    run = base / "run"
    with start_twin("tiny", speed=SPEED) as twin:
        prioritize(twin.proc.pid)
        rc, _, err = _bench("run", "--url", twin.url, "--workload", str(spec), "--out", str(run))
        assert rc == 0, err[-3000:]
    return base, run, card


def _ours(run: Path, card: PublisherCard) -> dict[str, float]:
    (trial,) = trials_of(run, run_files.load_results(run), gpus=card.gpu_count)
    out = {}
    for f in card.figures:
        if f.computed_as is None:
            continue
        v = metrics.compute(
            f.computed_as, trial.records, duration_s=trial.duration_s, gpus=trial.gpus
        )
        if v is not None:
            out[f.name] = v
    return out


def test_a_card_set_to_what_the_run_measured_is_reproduced(
    measured: tuple[Path, Path, PublisherCard],
) -> None:
    base, run, card = measured
    ours = _ours(run, card)
    assert {"request_throughput", "output_throughput", "median_ttft_ms"} <= set(ours)
    same = base / "same.json"
    same.write_text(_with_figures(card, ours).model_dump_json())
    rc, out, err = _bench("reproduce", str(run), "--card", str(same))
    assert rc == 0, out[-3000:] + err[-2000:]
    assert "REPRODUCED within ±5 %" in out and "unsigned (a run directory" in out
    assert "the interval is ours alone" in out


def test_throughput_published_10_pct_higher_than_measured_is_not_reproduced(
    measured: tuple[Path, Path, PublisherCard],
) -> None:
    base, run, card = measured
    ours = _ours(run, card)
    better = dict(ours)
    for name in ("request_throughput", "output_throughput", "total_token_throughput"):
        if name in better:
            better[name] *= 1.10
    path = base / "better.json"
    path.write_text(_with_figures(card, better).model_dump_json())
    rc, out, _ = _bench("reproduce", str(run), "--card", str(path))
    assert rc == 1, out[-3000:]
    assert "NOT REPRODUCED" in out and "output_throughput" in out


def test_a_run_of_the_card_matrix_is_refused_for_a_publishers_card(
    measured: tuple[Path, Path, PublisherCard], tmp_path: Path
) -> None:
    base, _, _ = measured
    rc, _, err = _bench("reproduce", str(tmp_path), "--card", str(base / "card.json"))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err


def test_a_trial_our_client_fell_behind_in_is_left_out_not_judged(
    measured: tuple[Path, Path, PublisherCard], tmp_path: Path
) -> None:
    _, run, card = measured
    late = tmp_path / "late"
    shutil.copytree(run, late)
    results = json.loads((late / run_files.RESULTS).read_text())
    for point in results["workload"]["points"]:
        point["status"] = "late_client"
        point["reasons"] = ["the client sent late: lateness p99 700.5 ms > 50 ms"]
    (late / run_files.RESULTS).write_text(json.dumps(results))
    same = tmp_path / "same.json"
    same.write_text(_with_figures(card, _ours(run, card)).model_dump_json())
    rc, out, _ = _bench("reproduce", str(late), "--card", str(same))
    assert rc == int(Exit.INCONCLUSIVE), out[-3000:]
    assert "NOT RESOLVED" in out and "none of the run's 1 trial(s) measured the card's point" in out
    assert "Left out, not judged: trial 1 of 1: late_client: the client sent late" in out
    assert " REPRODUCED\n" not in out  # nothing was judged
