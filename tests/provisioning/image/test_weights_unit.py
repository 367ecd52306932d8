"""provisioning.image.weights and preflight's weights check on scripted command output."""

from __future__ import annotations

from provisioning.image import weights
from provisioning.preflight import storage
from provisioning.preflight.report import Status
from provisioning.preflight.requirements import Requirements
from tests.provisioning.preflight.test_preflight_unit import Scripted, ok

LFS = "a" * 64
SMALL = "b" * 64


def test_hashes_come_from_blob_names_or_the_host_never_both() -> None:
    listing = f"{LFS}  ./model.safetensors\n{SMALL}  ./config.json\nnot-a-hash  ./x\n"
    probe = Scripted({"find .": ok(listing)})
    files = weights.snapshot_hashes(probe, "/c", "o/m", "r" * 40)
    assert files == {"model.safetensors": LFS, "config.json": SMALL}
    # One command for the whole snapshot; the 64-hex blob names are not hashed again.
    assert len(probe.asked) == 1 and "sha256sum" in probe.asked[0]
    assert "models--o--m/snapshots/" + "r" * 40 in probe.asked[0]


def test_no_weights_is_not_applicable() -> None:
    check = storage.check_weights(Scripted({}), Requirements(profile="twin", gpus=0), "/m")
    assert check.status is Status.SKIP and check.found.startswith("not applicable")


def test_an_unpinned_profile_with_downloads_on_warns_that_main_is_fetched() -> None:
    req = Requirements(profile="p", gpus=0, weights_bytes=1, hf_model="o/m")
    check = storage.check_weights(Scripted({}), req, "/m")
    assert check.status is Status.WARN and "not pinned" in check.found
