"""Issue 49 on genuinely signed bundles (`bench sign` + `bench pack`): the bundle with a
second gzip member or a lone zero block and a forged results.json after it, refused by every
reader of bundles (bench verify, bench compare, bench history ingest; the orchestrator's
pull-back in tests/provisioning/flow/test_pull_back_forged.py) with exit 5 and nothing
recorded or left extracted; bundles packed by GNU tar still open; and the printed
stock-tools recipe catches the forgery too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import cli
from bench.bundle.pack import open_bundle
from bench.bundle.verify import verify_bundle
from bench.errors import Exit, VerifyFailed
from bench.history import schema
from bench.history.database import Target
from bench.local.command import closing_lines
from tests.bundle import forgeries as f
from tests.bundle.forgeries import FORGERIES, RUN_ID, Signed

pytestmark = pytest.mark.subprocess

TWO = ["second-gzip-member", "lone-zero-block"]  # the two


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    return Signed(tmp_path_factory.mktemp("signed"))


def _one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


@pytest.mark.parametrize("kind", TWO)
def test_bench_verify_refuses_the_forged_bundle_in_one_line_exit_5(
    signed: Signed, tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    allowed = ["--allowed-signers", str(signed.keys.allowed)]
    assert cli.main(["verify", str(signed.archive), *allowed]) == 0
    assert "OK " in capsys.readouterr().out
    forged = signed.forged(kind, tmp_path / "forged")
    assert cli.main(["verify", str(forged), *allowed]) == Exit.VERIFY_FAILED
    out, err = capsys.readouterr()
    assert out == ""
    genuine = signed.archive.read_bytes()
    end = f.end_of_members(f.unpacked(genuine))
    where = {
        "second-gzip-member": f"a second gzip member at byte {len(genuine)} of the file (",
        "lone-zero-block": f"a lone zero block at byte {end} of the tar, followed by data at "
        f"byte {end + f.BLOCK_BYTES} (",
    }[kind]
    assert _one_error_line(err).startswith(f"bench: error: {RUN_ID}.tar.gz: refused, {where}")


@pytest.mark.parametrize("kind", list(FORGERIES))
def test_open_and_verify_bundle_refuse_it_leaving_nothing(
    signed: Signed, tmp_path: Path, kind: str
) -> None:
    forged = signed.forged(kind, tmp_path / "forged")
    with pytest.raises(VerifyFailed, match=FORGERIES[kind][1]):
        verify_bundle(forged, signed.keys.allowed)
    target = tmp_path / "target"
    with pytest.raises(VerifyFailed, match=FORGERIES[kind][1]):
        open_bundle(forged, target)
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("kind", TWO)
def test_bench_compare_refuses_the_forged_bundle(
    signed: Signed, tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = signed.forged(kind, tmp_path / "forged")
    argv = ["compare", str(forged), str(signed.archive)]
    assert cli.main([*argv, "--allowed-signers", str(signed.keys.allowed)]) == 5
    line = _one_error_line(capsys.readouterr().err)
    assert f"{RUN_ID}.tar.gz: refused, {FORGERIES[kind][1]}" in line
    # --unverified reads a bundle whose signature fails, never one that cannot be read as one
    assert cli.main([*argv, "--unverified"]) == Exit.VERIFY_FAILED
    assert FORGERIES[kind][1] in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("kind", TWO)
def test_bench_history_ingest_refuses_the_forged_bundle_and_records_nothing(
    signed: Signed, tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Target("sqlite", str(tmp_path / "history.sqlite3"))
    forged = signed.forged(kind, tmp_path / "forged")
    trusted = ["--db", db.where, "--allowed-signers", str(signed.keys.allowed)]
    for more in ([], ["--unverified"]):
        assert cli.main(["history", "ingest", str(forged), *trusted, *more]) == 5
        out, err = capsys.readouterr()
        assert f"{RUN_ID}.tar.gz: refused, {FORGERIES[kind][1]}" in out + err
        assert "recorded, run" not in out
    with schema.opened(db) as conn:
        assert conn.query("SELECT COUNT(*) FROM runs") == [(0,)]
    assert cli.main(["history", "ingest", str(signed.archive), *trusted]) == 0  # the genuine one
    assert f"recorded, run {RUN_ID}" in capsys.readouterr().out
    with schema.opened(db) as conn:
        assert conn.query("SELECT COUNT(*) FROM runs") == [(1,)]


def test_a_bundle_packed_by_gnu_tar_still_opens_and_verifies(
    signed: Signed, tmp_path: Path
) -> None:
    archive = tmp_path / f"{RUN_ID}.tar.gz"
    subprocess.run(
        ["tar", "-czf", str(archive), "-C", str(signed.run_dir.parent), RUN_ID], check=True
    )
    tar = f.unpacked(archive.read_bytes())
    assert len(tar) % 10240 == 0  # GNU tar's records: the zero padding is longer than ours
    assert len(tar) - f.end_of_members(tar) >= 1024
    root = open_bundle(archive, tmp_path / "opened")
    assert (root / "samples").is_dir()  # GNU tar has directory members; pack() has none
    assert verify_bundle(archive, signed.keys.allowed).run_id == RUN_ID
    assert verify_bundle(signed.archive, signed.keys.allowed).run_id == RUN_ID


@pytest.mark.parametrize("kind", TWO)
def test_the_printed_stock_recipe_passes_the_bundle_and_fails_the_forgery(
    signed: Signed, tmp_path: Path, kind: str
) -> None:
    """`bench local`'s printed lines for stock tools (GNU tar -i, ssh-keygen, sha256sum):
    `tar -xzif` reads on past the signed archive's end, so the forged results.json lands
    over the signed one and `sha256sum -c` fails on it."""

    def stock_recipe(bundle: Path) -> subprocess.CompletedProcess[str]:
        lines = closing_lines(bundle, 6, signed.keys.principal, key=signed.keys.private,
                              allowed=signed.keys.allowed, page=tmp_path / "page.html")  # fmt: skip
        start = lines.index("or with stock OpenSSH and coreutils, in a new directory:")
        stock = [line.removeprefix("  ") for line in lines[start + 1 :]]
        assert len(stock) == 3 and " tar -xzif " in stock[0], stock
        script = "set -euo pipefail\n" + "\n".join(stock) + "\n"
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              timeout=60, check=False, cwd=tmp_path)  # fmt: skip

    genuine = tmp_path / "genuine" / signed.archive.name
    genuine.parent.mkdir()
    genuine.write_bytes(signed.archive.read_bytes())
    ok = stock_recipe(genuine)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert 'Good "vllm-bench-bundle@v1" signature for alice@example.org' in ok.stdout + ok.stderr
    assert "results.json: OK" in ok.stdout and "FAILED" not in ok.stdout

    forged = signed.forged(kind, tmp_path / "forged")
    bad = stock_recipe(forged)
    assert bad.returncode != 0, bad.stdout + bad.stderr
    assert 'Good "vllm-bench-bundle@v1" signature' in bad.stdout + bad.stderr  # manifest intact
    assert "results.json: FAILED" in bad.stdout
    extracted = forged.with_name(f"{RUN_ID}-check") / RUN_ID / "results.json"
    assert extracted.read_bytes() == f.FORGED_RESULTS
