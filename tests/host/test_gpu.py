"""nvidia-smi parsing on its real output formats, the sampler against a stand-in nvidia-smi."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.host import inventory, telemetry

DATA = Path(__file__).parent / "data"


def _canned(outputs: dict[str, tuple[int, str, str]]) -> inventory.Runner:
    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        for needle, answer in outputs.items():
            if any(needle in a for a in argv):
                return answer
        return 2, "", f"unexpected {list(argv)}"

    return run


def test_inventory_of_four_rtx_pro_6000() -> None:
    run = _canned(
        {
            "--query-gpu=index": (
                0,
                (DATA / "nvidia_smi_inventory_4x_rtxpro6000.csv").read_text(),
                "",
            ),
            "-q": (0, (DATA / "nvidia_smi_q_header.txt").read_text(), ""),
        }
    )
    inv = inventory.inventory(run, executable="/usr/bin/nvidia-smi")
    assert inv.available
    assert inv.driver_version == "580.95.05"
    assert inv.cuda_version == "13.0"
    assert [g.index for g in inv.gpus] == [0, 1, 2, 3]
    first = inv.gpus[0]
    assert first.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert first.memory_total_mib == 97887
    assert first.power_limit_w == 600.0
    assert first.pci_bus_id == "00000000:17:00.0"


def test_inventory_with_header_units_and_not_available_values() -> None:
    driver, gpus = inventory.parse_inventory(
        (DATA / "nvidia_smi_inventory_with_header_and_units.csv").read_text()
    )
    assert driver == "550.54.15"
    assert [g.name for g in gpus] == ["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090 Laptop GPU"]
    assert gpus[0].memory_total_mib == 81559 and gpus[0].power_limit_w == 700.0
    assert gpus[0].max_sm_clock_mhz == 1980
    assert gpus[1].power_limit_w is None  # "[N/A]" is unknown, not zero


def test_cuda_version_from_q_or_banner() -> None:
    assert inventory.parse_cuda_version((DATA / "nvidia_smi_q_header.txt").read_text()) == "13.0"
    assert inventory.parse_cuda_version((DATA / "nvidia_smi_banner.txt").read_text()) == "12.4"
    assert inventory.parse_cuda_version("no such line") is None


def test_throttle_bitmask_names_nvml_reasons() -> None:
    assert telemetry.throttle_reasons("0x0000000000000000") == ()
    assert telemetry.throttle_reasons("0x0000000000000064") == (
        "sw_power_cap",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
    )
    assert telemetry.throttle_reasons("0x0000000000001001") == ("gpu_idle", "other_0x1000")
    assert telemetry.throttle_reasons("[Not Supported]") == ()


def test_telemetry_parse_drops_torn_lines_and_keeps_missing_as_none() -> None:
    samples = telemetry.parse_telemetry(
        (DATA / "nvidia_smi_telemetry.csv").read_text(), with_throttle=True
    )
    assert len(samples) == 6
    assert [s.at_s for s in samples if s.index == 0] == [0.0, 0.5, 1.0]
    missing = next(s for s in samples if s.index == 1 and s.at_s == 0.5)
    assert missing.power_w is None and missing.sm_clock_mhz == 2400


def test_window_energy_is_the_trapezoid_of_power_over_time() -> None:
    samples = telemetry.parse_telemetry(
        (DATA / "nvidia_smi_telemetry.csv").read_text(), with_throttle=True
    )
    window = telemetry.summarize(samples, output_tokens=100)
    g0, g1 = window.gpus
    # GPU 0: 0.5 s x (400+600)/2 + 0.5 s x (600+500)/2 = 250 + 275 J
    assert g0.energy_j == pytest.approx(525.0)
    # GPU 1: the [N/A] sample is skipped, 1.0 s x (380+420)/2
    assert g1.energy_j == pytest.approx(400.0)
    assert window.energy_j == pytest.approx(925.0)
    assert window.energy_per_output_token_j == pytest.approx(9.25)
    assert g0.max_temperature_c == 88 and g0.min_sm_clock_mhz == 2100
    assert g0.throttle_reasons == {
        "hw_thermal_slowdown": pytest.approx(1 / 3, abs=1e-4),
        "sw_power_cap": pytest.approx(2 / 3, abs=1e-4),
        "sw_thermal_slowdown": pytest.approx(1 / 3, abs=1e-4),
    }
    assert g1.throttle_reasons == {"sw_power_cap": pytest.approx(1 / 3, abs=1e-4)}


def test_no_energy_claimed_from_a_single_sample() -> None:
    one = telemetry.parse_telemetry(
        "2026/12/02 11:30:00.000, 0, 400.00, 2520, 61, 98, 45\n", with_throttle=False
    )
    window = telemetry.summarize(one, output_tokens=10)
    assert window.gpus[0].energy_j is None
    assert window.energy_j is None and window.energy_per_output_token_j is None


def _stand_in(bin_dir: Path, body: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/bash\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_no_nvidia_smi_means_no_gpu_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    inv = inventory.inventory()
    assert not inv.available and inv.reason == "nvidia-smi not found on PATH"
    sampler = telemetry.GpuSampler()
    assert not sampler.available
    sampler.start()
    assert sampler.stop() == []


@pytest.mark.subprocess
def test_nvidia_smi_without_driver_means_no_gpu_with_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in(
        tmp_path / "bin",
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\n'
        "exit 9\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    inv = inventory.inventory()
    assert not inv.available
    assert inv.reason is not None and "couldn't communicate with the NVIDIA driver" in inv.reason


@pytest.mark.integration
def test_sampler_runs_nvidia_smi_for_the_window_and_falls_back_to_old_throttle_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "printed"
    argv_log = tmp_path / "argv"
    csv = (DATA / "nvidia_smi_telemetry.csv").read_text()
    # An older driver: the new field name is refused, the old one works.
    _stand_in(
        tmp_path / "bin",
        f"""echo "$@" >> {argv_log}
case "$*" in
  *clocks_event_reasons.active*)
    echo 'Field "clocks_event_reasons.active" is not a valid field to query.'; exit 2;;
  *-lms*) cat <<'CSV'
{csv}CSV
    touch {marker}; exec sleep 60;;
  *) echo 0x0000000000000000;;
esac
""",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    sampler = telemetry.GpuSampler(interval_s=0.25)
    assert sampler.available
    sampler.start()
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    samples = sampler.stop()
    assert len(samples) == 6
    assert samples[4].throttle_reasons == (
        "sw_power_cap",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
    )
    lms_call = next(line for line in argv_log.read_text().splitlines() if "-lms" in line)
    assert "clocks_throttle_reasons.active" in lms_call and lms_call.endswith("-lms 250")
    assert sampler.stop() == []  # stopping twice is harmless


def test_windows_append_to_the_run_and_read_back(tmp_path: Path) -> None:
    samples = telemetry.parse_telemetry(
        (DATA / "nvidia_smi_telemetry.csv").read_text(), with_throttle=True
    )
    path = tmp_path / telemetry.GPU_TELEMETRY_NAME
    telemetry.append_window(
        path, context_label="8K", concurrency=4, trial=0, samples=samples, output_tokens=100
    )
    telemetry.append_window(
        path, context_label="8K", concurrency=8, trial=0, samples=[], output_tokens=0
    )
    first, second = telemetry.read_windows(path)
    assert (first.concurrency, second.concurrency) == (4, 8)
    assert first.telemetry.energy_per_output_token_j == pytest.approx(9.25)
    assert len(first.samples) == 6
    assert second.telemetry.gpus == () and second.telemetry.energy_j is None
    assert telemetry.read_windows(tmp_path / "absent.jsonl") == []


def test_energy_counter_is_probed_and_refused_when_the_driver_does_not_offer_it() -> None:
    exe = "/usr/bin/nvidia-smi"
    offered = _canned({"total_energy_consumption": (0, "123456789\n987654321\n", "")})
    assert telemetry.energy_field(offered, exe) == "total_energy_consumption"
    refused = _canned(
        {"total_energy_consumption": (2, 'Field "total_energy_consumption" is not a valid '
                                         "field to query.\n", "")}
    )  # fmt: skip
    assert telemetry.energy_field(refused, exe) is None
    one_na = _canned({"total_energy_consumption": (0, "123456789\n[N/A]\n", "")})
    assert telemetry.energy_field(one_na, exe) is None  # every GPU has it, or none is used
    hex_answer = _canned({"total_energy_consumption": (0, "0x0000000000000000\n", "")})
    assert telemetry.energy_field(hex_answer, exe) is None


def _energy_rows(counters: list[str]) -> str:
    return "".join(
        f"2026/12/02 11:30:0{i}.000, 0, 500.00, 1980, 60, 99, 40, 0x0, {mj}\n"
        for i, mj in enumerate(counters)
    )


def test_window_energy_comes_from_the_counter_when_every_sample_has_it() -> None:
    samples = telemetry.parse_telemetry(
        _energy_rows(["1000000", "1400000", "1900000"]), with_throttle=True, with_energy=True
    )
    assert [s.energy_mj for s in samples] == [1_000_000, 1_400_000, 1_900_000]
    window = telemetry.summarize(samples, output_tokens=300)
    # (1,900,000 - 1,000,000) mJ = 900 J, not the power integral's 2 s x 500 W = 1000 J.
    assert window.gpus[0].energy_j == pytest.approx(900.0)
    assert window.energy_source == window.gpus[0].energy_source == "energy_counter"
    assert window.energy_per_output_token_j == pytest.approx(3.0)


@pytest.mark.parametrize(
    "counters",
    [["5000", "[N/A]", "[N/A]"], ["9000000", "100", "900"]],  # missing at the end; reset
)
def test_window_energy_falls_back_to_the_power_integral(counters: list[str]) -> None:
    samples = telemetry.parse_telemetry(
        _energy_rows(counters), with_throttle=True, with_energy=True
    )
    window = telemetry.summarize(samples, output_tokens=100)
    assert window.gpus[0].energy_j == pytest.approx(1000.0)  # 500 W over 2 s
    assert window.energy_source == "power_integral"


def test_a_non_finite_reading_is_no_reading() -> None:
    assert inventory.number("nan") is None and inventory.number("inf W") is None
    assert inventory.number("12.5 W") == 12.5
