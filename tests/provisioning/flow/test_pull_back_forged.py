"""Issue 49 at the orchestrator's end: the bundle pulled back from a host is opened by
provisioning.flow.pull_back.open_and_verify through bench.bundle.pack.open_bundle, so a signed
bundle with a forged results.json after its end (a second gzip member, a lone zero block, a
duplicate member) is refused there, and nothing of it is left beside the archive."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.errors import VerifyFailed
from provisioning.flow.pull_back import open_and_verify
from tests.bundle.forgeries import FORGERIES, RUN_ID, Signed

pytestmark = pytest.mark.subprocess  # ssh-keygen signs the bundle


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    return Signed(tmp_path_factory.mktemp("signed"))


@pytest.mark.parametrize("kind", list(FORGERIES))
def test_the_pull_back_refuses_the_forged_bundle_and_keeps_nothing_of_it(
    signed: Signed, tmp_path: Path, kind: str
) -> None:
    forged = signed.forged(kind, tmp_path / "results" / "gpu01")
    with pytest.raises(VerifyFailed, match=FORGERIES[kind][1]):
        open_and_verify(forged, RUN_ID, signed.keys.allowed, [])
    assert not (forged.parent / RUN_ID).exists()
    assert [p.name for p in forged.parent.rglob("*")] == [forged.name]  # no folder either
    genuine = tmp_path / "genuine" / "gpu01" / signed.archive.name
    genuine.parent.mkdir(parents=True)
    genuine.write_bytes(signed.archive.read_bytes())
    assert open_and_verify(genuine, RUN_ID, signed.keys.allowed, []) is True
    assert (genuine.parent / RUN_ID / "results.json").is_file()
