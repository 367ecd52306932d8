"""Workload files (bench.workload_spec): every shipped preset loads, and a bad file is one
UsageError line naming its problem (exit 2), never a traceback."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.errors import UsageError
from bench.workload.schedule import plan_point
from bench.workload_spec import WORKLOAD_DIR, Workload, available, load_workload
from tests.support.budget import fixed_budget

GOOD_WORKLOAD = 'name = "w"\n[arrivals]\nrates = [1.0, 4.0]\n'


def _load_bad(path: Path, content: str | bytes) -> str:
    """The one line a bad workload file gives."""
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(UsageError) as caught:
        load_workload(path)
    line = caught.value.one_line()
    assert "\n" not in line and "\r" not in line, line
    return line


def test_every_shipped_preset_loads_and_plans() -> None:
    """A preset that does not load is a `bench run --workload NAME` that exits 2 out of the
    box; each loads by name and by path, and each of its points plans."""
    names = available()
    assert names, "no preset found in bench/workloads/"
    assert names == sorted(p.stem for p in WORKLOAD_DIR.glob("*.toml"))
    for name in names:
        by_name = load_workload(name)
        assert by_name.name == name  # what results call it is what `--workload` takes
        assert by_name == load_workload(WORKLOAD_DIR / f"{name}.toml")
        for point in range(len(by_name.arrivals.points())):
            assert plan_point(by_name, point)


def test_a_good_file_loads_and_inf_is_a_rate(tmp_path: Path) -> None:
    (tmp_path / "w.toml").write_text(GOOD_WORKLOAD.replace("4.0", "inf"))
    w = load_workload(tmp_path / "w.toml")
    assert w.arrivals.rates[0] == 1.0 and math.isinf(w.arrivals.rates[1])


ARRIVALS = 'name = "w"\n[arrivals]\n'
BAD_FILES: list[tuple[str, str | bytes, str]] = [
    ("empty", b"", "name: Field required (and 1 more)"),
    ("no arrivals", 'name = "w"\n', "arrivals: Field required"),
    ("not toml", "name = = w", "is not valid TOML"),
    ("not utf-8", b'name = "\xff\xfe"\n[arrivals]\nrates = [1.0]\n', "is not UTF-8 text"),
    ("too large", GOOD_WORKLOAD + "#" * 70_000 + "\n", "larger than 65,536 bytes"),
    ("rate 0", ARRIVALS + "rates = [1.0, 0]", "arrivals.rates: rate 0.0 is not a rate"),
    ("negative rate", ARRIVALS + "rates = [-2.0]", "arrivals.rates: rate -2.0 is not a rate"),
    ("nan rate", ARRIVALS + "rates = [nan]", "arrivals.rates: rate nan is not a rate"),
    ("too fast", ARRIVALS + "rates = [2e6]", "arrivals.rates: rate 2000000.0"),
    ("no rates", ARRIVALS + 'process = "poisson"', "need rates"),
    (
        "concurrencies for rate",
        ARRIVALS + "rates = [1.0]\nconcurrencies = [4]",
        "concurrencies belong to closed-count",
    ),
    ("burstiness, poisson", ARRIVALS + "rates = [1.0]\nburstiness = 0.5", "set process = 'gamma'"),
    (
        "range_ratio 1, vllm",
        GOOD_WORKLOAD + "[lengths]\nrange_ratio = 1.0\nsemantics = 'vllm'",
        "range_ratio must be below 1",
    ),
    (
        "prefix as long as shortest prompt",
        GOOD_WORKLOAD + "[lengths]\ninput_tokens = 100\nrange_ratio = 0.5\n[prefix]\ntokens = 50",
        "shared prefix (50 tokens) must be shorter than the shortest prompt",
    ),
    ("unknown field", ARRIVALS + "rates = [1.0]\nrate = 2.0", "arrivals.rate: Extra inputs"),
    ("unknown table", GOOD_WORKLOAD + "[slos]\nx = 1", "slos: Extra inputs"),
]


@pytest.mark.parametrize(
    ("content", "named"), [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES]
)
def test_a_bad_file_is_one_usage_error_line_naming_it(
    tmp_path: Path, content: str | bytes, named: str
) -> None:
    path = tmp_path / "bad.toml"
    line = _load_bad(path, content)
    assert named in line
    assert str(path) in line


def test_a_prefix_just_shorter_than_the_shortest_prompt_loads(tmp_path: Path) -> None:
    """The bound is exact: 100 x (1 - 0.5) = 50 tokens shortest, so a 49-token prefix fits."""
    (tmp_path / "w.toml").write_text(
        GOOD_WORKLOAD + "[lengths]\ninput_tokens = 100\nrange_ratio = 0.5\n[prefix]\ntokens = 49"
    )
    assert load_workload(tmp_path / "w.toml").prefix.tokens == 49


def test_an_unknown_preset_and_a_directory_are_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as unknown:
        load_workload("no-such-preset")
    assert "unknown workload 'no-such-preset'" in unknown.value.one_line()
    with pytest.raises(UsageError) as folder:
        load_workload(tmp_path)
    assert f"workload {tmp_path} is a directory" in folder.value.one_line()
    with pytest.raises(UsageError) as missing:
        load_workload(tmp_path / "absent.toml")
    assert "does not exist" in missing.value.one_line()
    for caught in (unknown, folder, missing):
        assert "\n" not in caught.value.one_line()


def test_an_unknown_key_with_a_newline_stays_one_line(tmp_path: Path) -> None:
    """A quoted TOML key may hold a line feed; the message must still be one line."""
    _load_bad(tmp_path / "bad.toml", GOOD_WORKLOAD + '"bad\\nkey" = 1\n')


def test_deeply_nested_toml_is_a_usage_error(tmp_path: Path) -> None:
    """60 KB of '[' is under the 64 KiB bound and is not a workload: one line, exit 2."""
    _load_bad(tmp_path / "deep.toml", "x = " + "[" * 60_000)


_LINES = st.sampled_from(
    [
        'name = "w"',
        "name = 3",
        "[arrivals]",
        "[lengths]",
        "[prefix]",
        "[slo]",
        "rates = [1.0, inf]",
        "rates = [nan]",
        "rates = []",
        'kind = "closed-count"',
        "concurrencies = [1, 0]",
        'process = "gamma"',
        "burstiness = 0.0",
        "requests = 1e9",
        "input_tokens = 10",
        "range_ratio = 0.99",
        'semantics = "sglang"',
        "tokens = 5",
        "group_size = -1",
        "ttft_p99_s = 2",
        "seed = -1",
        "x = [[[",
        '"k\\tey" = 1',
    ]
)


@fixed_budget(300)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(str.encode),
        st.lists(_LINES, max_size=12).map(lambda lines: "\n".join(lines).encode()),
        st.lists(_LINES, max_size=6).map(lambda lines: (GOOD_WORKLOAD + "\n".join(lines)).encode()),
    )
)
def test_any_bytes_are_a_workload_or_a_usage_error(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes
) -> None:
    """Whatever the file holds: a Workload, or one UsageError line (no ValueError,
    TypeError or pydantic's ValidationError escaping)."""
    path = tmp_path_factory.getbasetemp() / "any.toml"
    path.write_bytes(raw)
    loaded = _workload_or_line(path)
    assert isinstance(loaded, Workload) or "\n" not in loaded


def _workload_or_line(path: Path) -> Workload | str:
    """The Workload, or the UsageError's line; any other exception propagates (and fails)."""
    try:
        return load_workload(path)
    except UsageError as exc:
        return exc.one_line()
