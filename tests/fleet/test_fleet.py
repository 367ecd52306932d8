"""`bench fleet`: one sweep on several nodes; the node that runs slower is named, and only it.

Synthetic bundles (tests/support/synth.py): the card's figures, every node with its own
seeded run-to-run noise, one node 9 % slower at 64 requests and above.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Mapping

import pytest

from bench.card.model import Card
from bench.cli import main
from bench.errors import Exit
from bench.fleet import nodes as fleet_nodes
from bench.fleet import report as fleet
from bench.fleet import rule as fleet_rule
from bench.fleet import words as fleet_words
from bench.host import telemetry
from bench.results import Results
from bench.verdict.cells import Cell, RunFigures
from bench.verdict.run_source import Verification
from tests.bundle.conftest import Keys
from tests.support.synth import make_results
from tests.verdict.test_cli import _bundle
from tests.verdict.test_inputs import _tampered, _unsigned_archive

pytestmark = pytest.mark.subprocess

NODES = ("gpu01", "gpu02", "gpu03", "gpu04")


def _env(name: str, driver: str = "580.82", clock: float = 2430.0) -> dict[str, object]:
    gpus = [
        {"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
         "max_sm_clock_mhz": clock, "power_limit_w": 600.0}
        for i in range(4)
    ]  # fmt: skip
    return {
        "host": {"hostname": name, "kernel": "6.8.0-49-generic"},
        "gpu": {"available": True, "driver_version": driver, "cuda_version": "13.2", "gpus": gpus},
        "image": {"digest": "sha256:" + "a" * 64},
        "vllm_version": "0.30.1rc1.dev452+g73a583112",
    }


def _fleet(
    tmp: pathlib.Path,
    card: Card,
    *,
    trials: int = 3,
    slow: Mapping[str, float] | None = None,
    env: Mapping[str, Mapping[str, object]] | None = None,
    results: Mapping[str, Results] | None = None,
    keys: Keys | None = None,
) -> list[pathlib.Path]:
    """One bundle per node (signed archives with `keys`, else run directories); a node
    in `slow` is that much slower (0.09 = 9 %) at 64 requests and above."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = []
    for i, name in enumerate(NODES):
        k = 1.0 - (slow or {}).get(name, 0.0)

        def scale(ctx: str, c: int, k: float = k) -> float:
            return k if c >= 64 else 1.0

        r = (results or {}).get(name) or make_results(
            card, trials=trials, noise=0.01, seed=i + 1, scale=scale
        )
        e = (env or {}).get(name, _env(name))
        out.append(_bundle(tmp, name, r, env=e, archive=keys is not None, keys=keys))
    return out


def _telemetry(run_dir: pathlib.Path, clock_mhz: float) -> None:
    """gpu_telemetry.jsonl of two windows whose 4 GPUs ran at `clock_mhz` on average."""
    stat = {
        "samples": 10,
        "energy_j": 900.0,
        "mean_power_w": 300.0,
        "max_power_w": 310.0,
        "mean_sm_clock_mhz": clock_mhz,
        "min_sm_clock_mhz": clock_mhz - 30,
        "max_temperature_c": 60.0,
        "mean_utilization_pct": 95.0,
        "throttle_reasons": {},
    }
    gpus = tuple(telemetry.GpuWindowStats.model_validate({**stat, "index": i}) for i in range(4))
    lines = []
    for conc in (1, 2):
        record = telemetry.WindowRecord(
            context_label="8K", concurrency=conc, output_tokens=1000, samples=(),
            telemetry=telemetry.WindowTelemetry(
                gpus=gpus,
                energy_j=3600.0, energy_per_output_token_j=3.6,
            ),
        )  # fmt: skip
        lines.append(record.model_dump_json())
    (run_dir / telemetry.GPU_TELEMETRY_NAME).write_text("\n".join(lines) + "\n")


def _report(paths: list[pathlib.Path], rule: fleet_rule.Rule | None = None) -> fleet.FleetReport:
    nodes = fleet_nodes.load_nodes(paths, Verification(unverified=True))
    return fleet.fleet(nodes, rule or fleet_rule.Rule())


def test_the_slow_node_and_only_it_is_named_with_its_driver(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {n: _env(n) for n in NODES} | {"gpu03": _env("gpu03", driver="580.65")}
    paths = _fleet(tmp_path, card, slow={"gpu03": 0.09}, env=env)
    for path, clock in zip(paths, (1975.0, 1990.0, 1650.0, 1980.0), strict=True):
        _telemetry(path, clock)
    html = tmp_path / "fleet.html"
    assert main(["fleet", *map(str, paths), "--html", str(html)]) == Exit.NOT_REPRODUCED
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if " slower at " in line or " faster at " in line]
    assert len(lines) == 1
    found = re.fullmatch(
        r"- gpu03 is (\d+)–(\d+) % slower at 64–128 requests at 8K and 64 requests at 16K "
        r"\(Total tok/s, Per request tok/s, TTFT, Time between tokens\); "
        r"its driver is 580\.65 while the others run 580\.82; "
        r"its GPUs ran at 1,650 MHz \(mean SM clock in the windows\) while the others ran "
        r"1,980 MHz \(median\)",
        lines[0],
    )
    assert found, lines[0]
    # 9 % less throughput is 9.9 % more latency; each node's noise is 1 % a trial.
    assert 7 <= int(found.group(1)) <= int(found.group(2)) <= 12
    assert out.rstrip().endswith("FLEET: 1 OF 4 NODES STANDS OUT: gpu03")
    assert "- Total tok/s: run-to-run sd of one trial 1." in out
    # The table: the slow node's value marked, the others plain.
    row = next(line for line in out.splitlines() if line.startswith("| 8K | 128 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "▼" in cells[4] and not any("▼" in c or "▲" in c for c in cells[2:4] + cells[5:6])
    assert cells[-1].startswith("gpu03 −")

    report = _report(paths)
    assert report.outlier_nodes == ("gpu03",)
    flagged = {(s.key, v.node) for s in report.spreads for v in s.outliers}
    slow_cells = {
        k for k, c in report.nodes[2].run.cells.items()
        if k[0] == "decode" and k[2] >= 64 and c.status == "valid"
    }  # fmt: skip
    assert {node for _, node in flagged} == {"gpu03"}
    assert {key for key, _ in flagged} == slow_cells
    for s in report.spreads:  # each of the four decode figures, at every slow cell
        if s.key in slow_cells:
            assert [v.node for v in s.outliers] == ["gpu03"], (s.key, s.metric.name)

    page = html.read_text()
    assert page.count("data:image/png;base64,") == 1
    assert "its driver is 580.65 while the others run 580.82" in page
    assert "<th>GPU max SM clock</th>" in page


def test_a_fleet_of_equals_names_nobody_exit_0(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _fleet(tmp_path, card)
    assert main(["fleet", *map(str, paths)]) == Exit.OK
    out = capsys.readouterr().out
    assert "Nodes that stand out" not in out and "▼" not in out and "▲" not in out
    # nobody named, and the line says what the rule could not have seen (the 2 % minimum
    # shift here: the nodes differ by about 1 %)
    assert out.rstrip().endswith(
        "FLEET: NO NODE STANDS OUT (4 NODES; ONE OFF BY UNDER 2.0 % IN EVERY CELL WOULD NOT BE "
        "NAMED)"
    )


def test_one_trial_per_node_says_so_and_uses_the_minimum_deviation(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _fleet(tmp_path / "a", card, trials=1, slow={"gpu02": 0.09})
    assert main(["fleet", *map(str, paths)]) == Exit.NOT_REPRODUCED
    out = capsys.readouterr().out
    assert (
        "- Total tok/s: no run-to-run noise estimate (one trial per node): "
        "a node stands out only beyond 5 % from the median" in out
    )
    assert out.rstrip().endswith("STANDS OUT: gpu02")
    # 3 % slower is beyond the other nodes' MAD but not beyond the stated 5 %: nobody.
    paths = _fleet(tmp_path / "b", card, trials=1, slow={"gpu02": 0.03})
    assert main(["fleet", *map(str, paths)]) == Exit.OK
    # And 9 % slower is nobody when the stated minimum is 15 % (9 % less throughput is
    # 9.9 % more latency, plus 1 % noise on either side: under 15 %).
    paths = _fleet(tmp_path / "c", card, trials=1, slow={"gpu02": 0.09})
    assert main(["fleet", *map(str, paths), "--min-deviation", "15"]) == Exit.OK
    assert "a node stands out only beyond 15 % from the median" in capsys.readouterr().out


def _runs(values: Mapping[str, Mapping[int, tuple[float, ...]]]) -> list[fleet_nodes.Node]:
    """A node per name: total tok/s trials per concurrency level at 8K."""
    out = []
    for name, by_level in values.items():
        cells = {
            c.key: c
            for c in (
                Cell("decode", "8K", level, "valid", None, {"total_tok_s": trials})
                for level, trials in by_level.items()
            )
        }
        levels = tuple(sorted(by_level))
        run = RunFigures(name, "run", 1.0, {}, cells, ("8K",), levels, trust="unsigned")
        out.append(fleet_nodes.Node(name, run))
    return out


LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)


def _nodes(
    spread: float, trial_sd: float, off: Mapping[str, Mapping[int, float]]
) -> list[fleet_nodes.Node]:
    """Four nodes at 100 tok/s in 8 cells; node i's value in cell j carries a fixed
    pattern of +-`spread` (the spread between nodes), its 3 trials +-`trial_sd`; `off`
    moves a node's value in some cells by a fraction."""
    values: dict[str, dict[int, tuple[float, ...]]] = {}
    for i, name in enumerate("abcd"):
        values[name] = {}
        for j, level in enumerate(LEVELS):
            base = 100.0 * (1 + spread * ((i + 2 * j) % 5 - 2) / 2)
            base *= 1 + off.get(name, {}).get(level, 0.0)
            values[name][level] = (base * (1 - trial_sd), base, base * (1 + trial_sd))
    return _runs(values)


def _named(
    nodes: list[fleet_nodes.Node], rule: fleet_rule.Rule | None = None
) -> set[tuple[str, int]]:
    report = fleet.fleet(nodes, rule or fleet_rule.Rule())
    cells = {(v.node, s.key[2]) for s in report.spreads for v in s.outliers}
    return cells | {(sh.node, 0) for sh in report.shifts}


def test_the_rule_needs_the_spread_between_nodes_and_the_noise() -> None:
    # 6 % off in one cell while the nodes agree to 0.1 % and repeat to 0.2 %: it stands out
    # there, and nowhere else.
    assert _named(_nodes(0.001, 0.002, {"d": {64: -0.06}})) == {("d", 64)}
    # The same 6 % among nodes that spread by +-2 % in every cell: within k sds, nobody.
    assert _named(_nodes(0.02, 0.002, {"d": {64: -0.06}})) == set()
    # 2 % off, far outside the nodes' 0.1 % spread but inside the run-to-run noise of the
    # trials (3 sds of a difference of two means of 3 trials of 2 %): nobody.
    assert _named(_nodes(0.001, 0.02, {"d": {64: -0.02}})) == set()


def test_a_node_off_everywhere_is_named_by_its_median() -> None:
    """3 % slower in every cell: the median over 8 cells is beyond k_node x s and beyond
    --min-shift (2 %): named across its cells."""
    slow = {"c": dict.fromkeys(LEVELS, -0.03)}
    nodes = _nodes(0.004, 0.001, slow)
    report = fleet.fleet(nodes, fleet_rule.Rule())
    assert {v.node for s in report.spreads for v in s.outliers} <= {"c"}
    assert [(sh.node, sh.cells, round(sh.deviation_pct)) for sh in report.shifts] == [("c", 8, -3)]
    assert report.outlier_nodes == ("c",) and report.exit_code == Exit.NOT_REPRODUCED
    (text,) = fleet_words.finding_texts(report, "c")
    amount = fleet_words._amount([report.shifts[0].deviation_pct])
    assert text.startswith("c is ") and text.endswith(
        f"{amount} slower in the median of its 8 cells (Total tok/s)"
    )
    # With the one-cell test out of the way (k given), a shift under --min-shift: nobody.
    assert _named(nodes, fleet_rule.Rule(k=100.0, min_shift_pct=5.0)) == set()
    assert _named(nodes, fleet_rule.Rule(k=100.0)) == {("c", 0)}
    # A healthy fleet: nobody.
    assert _named(_nodes(0.004, 0.001, {})) == set()


def test_two_nodes_are_not_judged() -> None:
    nodes = _runs({"a": {64: (100.0, 100.1)}, "b": {64: (80.0, 80.1)}})
    report = fleet.fleet(nodes, fleet_rule.Rule())
    assert not report.findings and not report.shifts and report.exit_code == Exit.PARTIAL


def test_settings_that_differ_are_not_comparable_until_accepted(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = make_results(card, trials=3, noise=0.01, seed=9)
    short = short.model_copy(
        update={"settings": short.settings.model_copy(update={"duration_s": 10.0})}
    )
    env = {n: _env(n) for n in NODES} | {
        "gpu04": {**_env("gpu04"), "image": {"digest": "sha256:" + "b" * 64}}
    }
    paths = _fleet(tmp_path, card, results={"gpu02": short}, env=env)
    assert main(["fleet", *map(str, paths)]) == Exit.NOT_COMPARABLE
    out = capsys.readouterr().out
    assert "- window_s: 30 / gpu02: 10" in out
    assert f"- image: sha256:{'a' * 64} / gpu04: sha256:{'b' * 64}" in out
    assert "NOT COMPARABLE: window_s,image differ between nodes" in out
    assert main(["fleet", *map(str, paths), "--accept", "window_s,image"]) == Exit.OK
    assert "(accepted)" in capsys.readouterr().out


def test_a_cell_failed_on_one_node_is_listed_and_partial(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = make_results(card, trials=3, noise=0.01, seed=7)
    cells = tuple(
        c.model_copy(update={"status": "invalid", "reason": "the server dropped 3 requests"})
        if (c.context_label, c.concurrency) == ("8K", 4)
        else c
        for c in broken.cells
    )
    paths = _fleet(tmp_path, card, results={"gpu01": broken.model_copy(update={"cells": cells})})
    assert main(["fleet", *map(str, paths)]) == Exit.PARTIAL
    out = capsys.readouterr().out
    assert "- 8K x4: gpu01 invalid" in out
    assert "1 CELLS NOT JUDGED ON EVERY NODE" in out


def test_hostile_inputs_one_line_and_the_named_exit(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], signer: Keys
) -> None:
    trusted = ["--allowed-signers", str(signer.allowed)]
    good = _fleet(tmp_path / "good", card, keys=signer)
    assert main(["fleet", *map(str, good), *trusted]) == Exit.OK
    capsys.readouterr()
    tampered = _tampered(tmp_path, card, signer)
    assert main(["fleet", *map(str, good[:2]), str(tampered), *trusted]) == Exit.VERIFY_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(
        r"tampered\.tar\.gz: does not verify: .*results\.json", err[0]
    )
    unsigned = _unsigned_archive(tmp_path, card)
    assert main(["fleet", *map(str, good[:2]), str(unsigned), *trusted]) == Exit.VERIFY_FAILED
    assert "manifest.json: missing" in capsys.readouterr().err
    # Read anyway with --unverified: said on the first line.
    code = main(["fleet", *map(str, good[:2]), str(tampered), *trusted, "--unverified"])
    assert code in (Exit.OK, Exit.NOT_REPRODUCED, Exit.PARTIAL, Exit.NOT_COMPARABLE)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("UNVERIFIED: tampered.tar.gz did not verify")
    # Not enough nodes, a file that is no bundle, JSON that is not results.
    assert main(["fleet", *map(str, good[:2]), *trusted]) == Exit.USAGE
    assert "at least 3 nodes" in capsys.readouterr().err
    junk = tmp_path / "junk" / "results.json"
    junk.parent.mkdir()
    junk.write_text(json.dumps({"cells": "no"}))
    assert main(["fleet", *map(str, good[:2]), str(junk), *trusted]) == Exit.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match the results schema" in err[0]


def test_node_names_hostnames_else_bundle_names() -> None:
    assert fleet_nodes.node_names(["a/x.tar.gz", "b/y.tar.gz"], ["gpu01", "gpu02"]) == [
        "gpu01",
        "gpu02",
    ]
    assert fleet_nodes.node_names(["a/x.tar.gz", "b/y.tgz"], ["h", "h"]) == ["x", "y"]
    assert fleet_nodes.node_names(["a/results.json", "b/results.json"], [None, None]) == ["a", "b"]
    assert fleet_nodes.node_names(["a/r.tar.gz", "b/r.tar.gz"], [None, None]) == ["r#1", "r#2"]


def test_where_and_how_much_in_words() -> None:
    levels = (1, 2, 4, 8, 16, 32, 64, 128)
    one = ("8K",)
    assert fleet_words.where([("decode", "8K", 64), ("decode", "8K", 128)], levels, one) == (
        "64–128 requests"
    )
    assert fleet_words.where([("decode", "8K", 1)], levels, one) == "1 request"
    assert fleet_words.where([("decode", "8K", 1), ("decode", "8K", 64)], levels, one) == (
        "1, 64 requests"
    )
    two = ("8K", "16K")
    both = [("decode", c, n) for c in two for n in (64, 128)]
    assert fleet_words.where(both, levels, two) == "64–128 requests (8K, 16K)"
    mixed = [("decode", "8K", 64), ("decode", "8K", 128), ("decode", "16K", 64)]
    assert fleet_words.where(mixed, levels, two) == "64–128 requests at 8K and 64 requests at 16K"
    assert fleet_words.where([("prefill", "16K", 1)], levels, two) == "prefill at 16K"
    three = ("8K", "16K", "32K")
    shared = [("decode", c, n) for c in ("8K", "16K") for n in (1, 2)] + [("decode", "32K", 1)]
    assert fleet_words.where(shared, levels, three) == "1–2 requests (8K, 16K) and 1 request at 32K"
    assert fleet_words._amount([-9.2, -8.6]) == "9 %"
    assert fleet_words._amount([-8.4, -10.2]) == "8–10 %"
    assert fleet_words._amount([2.34]) == "2.3 %"


def test_records_that_do_not_read_are_not_recorded(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """environment.json of the wrong shapes and a gpu_telemetry.jsonl that does not parse:
    no crash, no fact, no clock; the figures are still judged."""
    junk: list[object] = [
        [1, 2],
        {"gpu": "x", "host": [1], "image": 5},
        {"gpu": {"gpus": [1, None, {"name": 7, "max_sm_clock_mhz": "fast"}]}, "host": {}},
    ]
    for env in junk:
        assert fleet_nodes.facts_of(env) == {} or set(fleet_nodes.facts_of(env)) <= {
            "GPU model",
            "GPU count",
        }
        assert fleet_nodes.hostname(env) is None
    env = {"gpu01": junk[0], "gpu02": junk[1], "gpu03": junk[2]}
    paths = _fleet(tmp_path, card, slow={"gpu04": 0.09}, env=env)  # type: ignore[arg-type]
    (paths[0] / telemetry.GPU_TELEMETRY_NAME).write_bytes(b"\xff{not json\n")
    (paths[1] / telemetry.GPU_TELEMETRY_NAME).write_text('{"context_label": 1}\n')
    assert fleet_nodes.window_clock(paths[0] / telemetry.GPU_TELEMETRY_NAME) is None
    assert fleet_nodes.window_clock(paths[1] / telemetry.GPU_TELEMETRY_NAME) is None
    assert main(["fleet", *map(str, paths)]) == Exit.NOT_REPRODUCED
    out = capsys.readouterr().out
    assert out.rstrip().endswith("STANDS OUT: gpu04")
    assert "its driver is 580.82 while the others run not recorded" in out
    # The same records do not crash `bench compare` either (the loader is shared).
    assert main(["compare", str(paths[1]), str(paths[2])]) in (Exit.OK, Exit.NOT_REPRODUCED)
