"""Prompts from a ShareGPT-format dataset (bench.workload.datasets, `[prompts] source =
"sharegpt"`): vLLM's rules for what is dropped, the chars / 4 estimate, sampling without
replacement then with, the prompt sent verbatim, the same seed giving the same bytes, and
the shipped sample written by tools/workload_samples.py byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
import random
from array import array
from pathlib import Path
from typing import Any

import pytest

from bench.errors import UsageError
from bench.run.workload_text import WorkloadTexts
from bench.workload import datafile, datasets
from bench.workload.schedule import dataset_of, longest_request, plan_point
from bench.workload_spec import Workload, load_workload
from tools import workload_samples

LINE = (3.0, 1.25)  # tokens = a + b x words: not used by a dataset's prompts


def _turn(who: str, value: str) -> dict[str, str]:
    return {"from": who, "value": value}


def _conv(prompt: str, answer: str = "x" * 40, first: str = "human") -> dict[str, Any]:
    return {"id": "c", "conversations": [_turn(first, prompt), _turn("gpt", answer)]}


def _write(path: Path, entries: list[Any]) -> Path:
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def _workload(tmp_path: Path, entries: list[Any], **extra: str) -> Workload:
    """A workload of 2 rates x 5 requests on `entries`, loaded from a TOML beside them."""
    _write(tmp_path / "d.json", entries)
    body = "\n".join(f"{k} = {v}" for k, v in extra.items())
    (tmp_path / "w.toml").write_text(
        'name = "ds"\nseed = 5\n[arrivals]\nrates = [2.0, inf]\nrequests = 5\n'
        f'[prompts]\nsource = "sharegpt"\npath = "d.json"\n{body}\n',
        encoding="utf-8",
    )
    return load_workload(tmp_path / "w.toml")


def test_a_token_is_four_characters_rounded_up() -> None:
    cases = {"": 0, "a": 1, "abcd": 1, "abcde": 2, "é" * 8: 2, "你好你好你": 2}
    assert {text: datasets.estimate_tokens(text) for text in cases} == cases


def test_each_rule_drops_what_it_names_and_keeps_the_bounds_exactly(tmp_path: Path) -> None:
    """vLLM's rules (fewer than 2 turns; prompt or output under 4; prompt over 1,024;
    prompt + output over 2,048), ours (a first turn not from a user, or empty), each at its
    bound: 4 tokens, 1,024 and 2,048 are kept, one more or less is not."""
    entries: list[Any] = [
        {"id": "no conversations"},  # 0
        {"conversations": [_turn("human", "just one turn here")]},  # 1
        _conv("a prompt from the model", first="gpt"),  # 2
        _conv("   "),  # 3: empty
        _conv("x" * 12),  # 4: 3 tokens
        _conv("x" * 13),  # 5: 4 tokens: kept
        _conv("a long enough prompt", answer="y" * 12),  # 6: output 3 tokens
        _conv("x" * 4096, answer="y" * 16),  # 7: 1,024: kept
        _conv("x" * 4097, answer="y" * 16),  # 8: 1,025
        _conv("x" * 4000, answer="y" * 4192),  # 9: 1,000 + 1,048 = 2,048: kept
        _conv("x" * 4000, answer="y" * 4193),  # 10: 2,049
        _conv("a user, not a human", first="user"),  # 11: kept
        _conv("lone \ud800 surrogate"),  # 12
    ]
    data = datasets.read_sharegpt(_write(tmp_path / "d.json", entries), "dataset d")
    assert list(data.entry) == [5, 7, 9, 11]
    assert list(data.prompt_tokens) == [4, 1024, 1000, 5]
    assert list(data.output_tokens) == [10, 4, 1048, 10]
    assert data.entries == len(entries)
    assert data.dropped == {
        datasets.FEW_TURNS: 2, datasets.NO_USER: 2, datasets.NOT_TEXT: 1,
        datasets.SHORT: 2, datasets.LONG: 1, datasets.TOTAL: 1,
    }  # fmt: skip
    assert data.prompt(11) == "a user, not a human"
    with pytest.raises(KeyError):
        data.prompt(8)


def test_only_the_first_two_turns_count(tmp_path: Path) -> None:
    """Later turns, whatever they hold, change nothing (vLLM reads turns 0 and 1 only)."""
    conv = _conv("what is the question here?")
    conv["conversations"] += [{"from": 3}, "not even a turn", None]
    data = datasets.read_sharegpt(_write(tmp_path / "d.json", [conv]), "dataset d")
    assert (data.prompt(0), data.prompt_tokens[0], data.output_tokens[0]) == (
        "what is the question here?", 7, 10,
    )  # fmt: skip


@pytest.mark.parametrize(("n", "kept"), [(3, 10), (10, 10), (25, 10), (7, 1)])
def test_a_sample_is_without_replacement_until_the_kept_run_out(n: int, kept: int) -> None:
    """vLLM takes distinct conversations while enough remain, then oversamples."""
    places = array("q", range(kept))
    data = datasets.ShareGptData("p", "s", kept, {}, places, places, places, places, b"")
    picks = data.sample(n, random.Random(1))
    assert len(picks) == n
    assert len(set(picks[:kept])) == min(n, kept)  # the first ones distinct
    assert set(picks) <= set(range(kept))
    if n >= kept:
        assert set(picks[:kept]) == set(range(kept))  # every one before any twice


def test_a_dataset_point_plans_its_conversations_and_sends_them_verbatim(tmp_path: Path) -> None:
    """Lengths are the conversations' estimates (not [lengths]'), group is the entry's
    place in the file, the text is the first turn as written, Unicode and all."""
    prompts = [f"Prompt {i}: ¿qué tal? 你好 🙂 " + "word " * i for i in range(8)]
    w = _workload(tmp_path, [_conv(p, answer="z" * (20 + i)) for i, p in enumerate(prompts)])
    for point in (0, 1):
        planned = plan_point(w, point)
        texts = WorkloadTexts(w, point, 0, LINE)
        assert len(planned) == 5 and len({p.group for p in planned}) == 5
        for p in planned:
            text = texts.text(p)
            assert text == prompts[p.group]
            assert p.input_tokens == datasets.estimate_tokens(text)
            assert p.output_tokens == datasets.estimate_tokens("z" * (20 + p.group))
    assert [p.at_s for p in plan_point(w, 1)] == [0.0] * 5  # inf: all at once
    assert plan_point(w, 0)[-1].at_s > 0


def test_the_same_seed_sends_the_same_bytes_and_another_seed_other_ones(tmp_path: Path) -> None:
    w = _workload(tmp_path, [_conv(f"prompt number {i:03d}") for i in range(200)])

    def sent(workload: Workload, point: int = 0, trial: int = 0) -> list[str]:
        texts = WorkloadTexts(workload, point, trial, LINE)
        return [hashlib.sha256(texts.text(p).encode()).hexdigest()
                for p in plan_point(workload, point, trial)]  # fmt: skip

    first = sent(w)
    assert sent(w.model_copy()) == first == sent(load_workload(tmp_path / "w.toml"))
    assert sent(w.model_copy(update={"seed": 6})) != first
    assert sent(w, point=1) != first and sent(w, trial=1) != first
    warm = w.model_copy(update={"arrivals": w.arrivals.model_copy(update={"warmups": 5})})
    assert [p.group for p in plan_point(warm, 0, warmup=True)] != [
        p.group for p in plan_point(warm, 0)
    ]


def test_loading_fills_in_the_files_sha256_and_refuses_another(tmp_path: Path) -> None:
    w = _workload(tmp_path, [_conv("a question of some length")])
    raw = (tmp_path / "d.json").read_bytes()
    assert w.prompts.sha256 == hashlib.sha256(raw).hexdigest()
    assert w.prompts.path == str(tmp_path / "d.json")  # made absolute: results name it
    again = Workload.model_validate(w.model_dump())  # what `bench run` re-validates
    assert dataset_of(again).sha256 == w.prompts.sha256
    (tmp_path / "d.json").write_text(json.dumps([_conv("another question, longer")]))
    os.utime(tmp_path / "d.json", ns=(1, 1))  # a new mtime: read again, not the cached copy
    with pytest.raises(UsageError) as changed:
        dataset_of(again)
    assert "not the workload's" in changed.value.one_line()


def test_a_dataset_takes_only_ignore_eos_from_lengths_and_no_prefix(tmp_path: Path) -> None:
    base = {"name": "d", "arrivals": {"rates": [1.0]}}
    sharegpt = {"source": "sharegpt", "path": "x.json"}
    bad: list[tuple[dict[str, Any], str]] = [
        ({"prompts": {"source": "sharegpt"}}, "needs path"),
        ({"prompts": {"path": "x.json"}}, "belong to a dataset source"),
        ({"prompts": sharegpt, "lengths": {"input_tokens": 8}}, "takes only ignore_eos"),
        ({"prompts": sharegpt, "prefix": {"tokens": 8}}, "no [prefix]"),
        ({"prompts": {**sharegpt, "sha256": "ab"}}, "sha256"),
    ]
    for extra, named in bad:
        with pytest.raises(ValueError, match=named.replace("[", r"\[")):
            Workload.model_validate({**base, **extra})
    ok = Workload.model_validate({**base, "prompts": sharegpt, "lengths": {"ignore_eos": False}})
    assert not ok.lengths.ignore_eos and ok.data_driven()


def test_a_shipped_name_is_found_and_an_unknown_one_is_one_line() -> None:
    assert (
        datafile.resolve("sharegpt-sample", ".json") == datafile.DATA_DIR / "sharegpt-sample.json"
    )
    with pytest.raises(UsageError) as unknown:
        datafile.resolve("no-such-data", ".json")
    assert "no shipped data file 'no-such-data'" in unknown.value.one_line()
    assert "sharegpt-sample" in unknown.value.one_line()


def test_the_shipped_preset_plans_200_conversations_a_point() -> None:
    w = load_workload("sharegpt-qps")
    data = dataset_of(w)
    assert w.arrivals.points() == (1.0, 4.0, 16.0, float("inf"))
    assert w.prompts.path == "sharegpt-sample" and w.prompts.sha256 == data.sha256
    assert 250 <= len(data) < data.entries == workload_samples.SHAREGPT_ENTRIES
    assert set(data.dropped) == {
        datasets.FEW_TURNS,
        datasets.NO_USER,
        datasets.SHORT,
        datasets.LONG,
        datasets.TOTAL,
    }
    for point in range(4):
        planned = plan_point(w, point)
        assert len(planned) == 200 and len({p.group for p in planned}) == 200


def test_the_preset_reads_back_from_json_inf_and_all() -> None:
    """results.json holds the workload as run: its rate inf is written "Infinity" (JSON has
    no inf; null would not read back as a rate) and the whole workload reads back equal."""
    w = load_workload("sharegpt-qps")
    text = w.model_dump_json()
    assert '"rates":[1.0,4.0,16.0,"inf"]' in text
    assert Workload.model_validate_json(text) == w


def test_the_longest_request_is_the_datas(tmp_path: Path) -> None:
    """What a max_model_len check needs: the conversation with the most tokens in all."""
    w = _workload(tmp_path, [_conv("x" * 400, "y" * 40), _conv("x" * 40, "y" * 800)])
    assert longest_request(w) == (10, 200)
    assert longest_request(load_workload("poisson-1k-128")) == (1024, 128)


def test_the_shipped_data_files_are_what_the_tool_writes(tmp_path: Path) -> None:
    """No outside data: tools/workload_samples.py writes both files from fixed seeds."""
    for path in workload_samples.write(tmp_path):
        shipped = datafile.DATA_DIR / path.name
        assert path.read_bytes() == shipped.read_bytes(), f"{shipped} is stale: regenerate it"
