"""The orchestrator's verdict (provisioning.runs.summary), made on the workstation: signed with
`bench local`'s key when the machine has one, beside the pulled-back run directory, and checked
by `bench verify --verdict`; without that key, one line says there is none."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import cli
from bench.bundle import seal
from bench.card.parse import read_card
from bench.errors import Exit
from provisioning.runs import summary
from tests.bundle.conftest import Keys
from tests.card.conftest import SHIPPED
from tests.support.synth import make_results

pytestmark = pytest.mark.subprocess


def test_the_orchestrators_verdict_is_signed_with_bench_locals_key_when_there_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keys").mkdir()
    keys = Keys(tmp_path / "keys", "vllm-bench@gpu-host")
    root = tmp_path / "run1"  # what the orchestrator pulls back: the signed run directory
    root.mkdir()
    (root / "results.json").write_text(
        make_results(read_card(SHIPPED), speed=10.0).model_dump_json()
    )
    seal.seal(root, keys.private, now=datetime(2026, 12, 2, 11, 45, tzinfo=UTC))
    verdict = tmp_path / "run1.verdict.intoto.json"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert summary._verdict(root, SHIPPED, keys.allowed) == Exit.OK
    assert not verdict.exists()
    assert "(no verdict attestation: no signing key " in capsys.readouterr().err
    # bench local's key (here a copy of the host's: any ed25519 key the workstation trusts).
    local = tmp_path / "home" / ".config" / "bench" / "signing_ed25519"
    local.parent.mkdir(parents=True)
    shutil.copy(keys.private, local)
    local.chmod(0o600)
    assert summary._verdict(root, SHIPPED, keys.allowed) == Exit.OK
    assert f"verdict attestation: {verdict} (signed by SHA256:" in capsys.readouterr().err
    code = cli.main(
        ["verify", str(root), "--integrity-only", "--allowed-signers", str(keys.allowed),
         "--verdict", str(verdict), "--card", str(SHIPPED)]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "verdict: REPRODUCED (exit 0) of run1/manifest.json against " in out
