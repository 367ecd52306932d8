"""provisioning.image.weights and preflight's weights check on scripted command output."""

from __future__ import annotations

from bench.bundle import provenance
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


def test_generated_weights_are_recorded_as_downloaded_ones_are_and_say_so() -> None:
    """The rehearsal's model (issue 47): revision and every file's sha256 from the cache as
    for a download, and `source` says the weights step built it."""
    rev = "c" * 40
    probe = Scripted({"refs/main": ok(rev), "test -d": ok(""), "find .": ok(f"{LFS}  ./m.bin\n")})
    found = weights.record(probe, "/c", "bench-test/tiny-llama", None, source="generated")
    assert found is not None
    record = found.as_json()
    assert record == {"model": "bench-test/tiny-llama", "revision": rev, "pinned": False,
                      "source": "generated", "files": {"m.bin": LFS}}  # fmt: skip
    assert found.banner().endswith("not pinned by the profile, built on the host (generated)")
    line = provenance.weights_line({"weights": record}, twin=False)
    assert line == f"weights: bench-test/tiny-llama at {rev}, not pinned, generated on the host"


def test_generated_weights_pass_preflight_with_downloads_off_and_nothing_asked() -> None:
    req = Requirements(profile="cpu-vllm", gpus=0, weights_bytes=1, hf_model="bench-test/t",
                       download_weights=False, weights_generated=True)  # fmt: skip
    probe = Scripted({})
    check = storage.check_weights(probe, req, "/m")
    assert check.status is Status.OK and "built on the host" in check.found
    assert probe.asked == []
