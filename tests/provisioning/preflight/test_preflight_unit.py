"""Preflight checks on scripted command output: no sockets, no sleeps."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from bench.errors import HostCheckFailed
from provisioning.hosts.shell import CommandResult
from provisioning.preflight import checks, gpu, memory, storage
from provisioning.preflight.report import Status
from provisioning.preflight.requirements import GIB, Requirements, load_requirements

PUBLISHED = Requirements(
    profile="published",
    gpus=4,
    gpu_model="RTX PRO 6000",
    gpu_memory_mib=97000,
    weights_bytes=230 * GIB,
    image_bytes=30 * GIB,
    hf_model="Qwen/Qwen3.5-397B-A17B-GPTQ-Int4",
)
FOUR_PRO_6000 = "\n".join(
    f"{i}, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97887, 590.44.01" for i in range(4)
)
TWO_A100 = (
    "0, NVIDIA A100-SXM4-80GB, 81920, 535.104.05\n1, NVIDIA A100-SXM4-80GB, 81920, 535.104.05"
)


class Scripted:
    """Answers commands by the first matching prefix; records what was asked."""

    def __init__(self, answers: dict[str, CommandResult | Callable[[str], CommandResult]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def run(self, command: str) -> CommandResult:
        self.asked.append(command)
        for key, answer in self.answers.items():
            if key in command:
                return answer(command) if callable(answer) else answer
        return CommandResult(command, 127, "", f"sh: {command.split(maxsplit=1)[0]}: not found")


def ok(stdout: str) -> CommandResult:
    return CommandResult("", 0, stdout, "")


def df(avail_bytes: int, mount: str = "/") -> CommandResult:
    header = "Filesystem 1-blocks Used Available Capacity Mounted\n"
    return ok(f"{header}/dev/x 1 1 {avail_bytes} 1% {mount}\n")


def test_matching_host_passes_gpu_checks() -> None:
    checks, gpus = gpu.check_gpus(Scripted({"nvidia-smi": ok(FOUR_PRO_6000)}), PUBLISHED)
    assert [c.status for c in checks] == [Status.OK, Status.OK, Status.OK]
    assert len(gpus) == 4 and gpus[0].memory_mib == 97887
    assert "4x NVIDIA RTX PRO 6000" in checks[0].found


def test_other_gpus_and_old_driver_are_named() -> None:
    checks, _ = gpu.check_gpus(Scripted({"nvidia-smi": ok(TWO_A100)}), PUBLISHED)
    by = {c.name: c for c in checks}
    assert by["GPUs"].status is Status.FAIL
    assert "2x NVIDIA A100-SXM4-80GB" in by["GPUs"].found
    assert "needs 4x RTX PRO 6000" in by["GPUs"].found
    assert by["GPU memory"].status is Status.FAIL and "81920 MiB" in by["GPU memory"].found
    assert by["driver"].status is Status.FAIL
    assert "535.104.05 is older than 580" in by["driver"].found
    assert "R580" in by["driver"].fix


def test_enough_gpus_but_too_few_of_the_model_fails() -> None:
    mixed = [*FOUR_PRO_6000.splitlines()[:3], "3, NVIDIA L40S, 46068, 590.44.01"]
    checks, _ = gpu.check_gpus(Scripted({"nvidia-smi": ok("\n".join(mixed))}), PUBLISHED)
    assert checks[0].status is Status.FAIL
    assert "3x NVIDIA RTX PRO 6000" in checks[0].found and "1x NVIDIA L40S" in checks[0].found


def test_no_nvidia_smi_fails_gpu_check_and_skips_the_rest() -> None:
    checks, _ = gpu.check_gpus(Scripted({}), PUBLISHED)
    assert checks[0].status is Status.FAIL
    assert checks[0].found == "nvidia-smi not found; launch published needs 4 GPUs"
    assert [c.status for c in checks[1:]] == [Status.SKIP, Status.SKIP]


def test_cpu_launch_skips_gpu_checks_without_asking() -> None:
    probe = Scripted({})
    req = Requirements(profile="twin", gpus=0)
    found, _ = gpu.check_gpus(probe, req)
    assert all(c.status is Status.SKIP for c in found)
    assert probe.asked == []
    assert checks.check_runtime(probe, req, {}).status is Status.SKIP


def test_driver_versions_compare_numerically() -> None:
    assert gpu.driver_version("580.65.06") >= (580, 0)
    assert gpu.driver_version("1000.1") > (580, 0)
    assert gpu.driver_version("575.99.99") < (580, 0)


def test_runtime_from_docker_info_or_toolkit_binaries() -> None:
    assert (
        checks.check_runtime(
            Scripted({}), PUBLISHED, {"Runtimes": {"nvidia": {}, "runc": {}}}
        ).status
        is Status.OK
    )
    hook = Scripted({"command -v": ok("/usr/bin/nvidia-ctk\n")})
    assert checks.check_runtime(hook, PUBLISHED, {"Runtimes": {"runc": {}}}).status is Status.OK
    missing = checks.check_runtime(
        Scripted({"command -v": CommandResult("", 1, "", "")}),
        PUBLISHED,
        {"Runtimes": {"runc": {}}},
    )
    assert missing.status is Status.FAIL and "nvidia-container-toolkit" in missing.fix
    assert "runc" in missing.found


def test_docker_permission_denied_says_what_to_do() -> None:
    denied = CommandResult(
        "", 1, "", "permission denied while trying to connect to the Docker daemon socket"
    )
    check, info = checks.docker_info(Scripted({"docker info": denied}))
    assert check.status is Status.FAIL and "docker group" in check.fix and info == {}
    check, info = checks.docker_info(
        Scripted({"docker info": ok(json.dumps({"ServerVersion": "27.1"}))})
    )
    assert check.status is Status.OK and check.found == "Docker 27.1"


def test_disk_counts_weights_already_in_the_cache() -> None:
    free = 100 * GIB
    probe = Scripted(
        {
            "du -sb": ok(f"{200 * GIB}\t/x\n"),
            "df -PB1": df(free, "/data"),
            "docker image inspect": CommandResult("", 1, "", ""),
        }
    )
    req = Requirements(profile="p", gpus=0, weights_bytes=230 * GIB, hf_model="a/b")
    check = storage.check_disk(probe, req, "/data/hf", {"DockerRootDir": "/data/docker"})
    assert check.status is Status.OK  # 30 GiB still to fetch, 100 free
    assert "weights need 30" in check.found
    empty = Scripted({"du -sb": ok("0\n"), "df -PB1": df(free, "/data")})
    check = storage.check_disk(empty, req, "/data/hf", {})
    assert check.status is Status.FAIL and "/data" in check.fix
    assert "100 GiB free, weights need 230" in check.found


def test_disk_adds_the_image_on_the_same_filesystem() -> None:
    probe = Scripted(
        {
            "du -sb": ok("0\n"),
            "df -PB1": df(250 * GIB, "/"),
            "docker image inspect": CommandResult("", 1, "", ""),
        }
    )
    req = Requirements(
        profile="p",
        gpus=0,
        weights_bytes=230 * GIB,
        image_bytes=30 * GIB,
        hf_model="a/b",
        image_ref="bench:x",
    )
    check = storage.check_disk(probe, req, "~/.cache/huggingface", {})
    assert check.status is Status.FAIL
    assert "weights + image need 260" in check.found
    assert any('"$HOME"' in c for c in probe.asked)  # ~ expands on the host, not here


def test_hf_token_only_when_the_model_is_gated() -> None:
    gated = Requirements(profile="p", gpus=1, hf_model="meta/x", hf_token_required=True)
    assert checks.check_hf_token(gated, token_present=False).status is Status.FAIL
    assert checks.check_hf_token(gated, token_present=True).status is Status.OK
    assert checks.check_hf_token(PUBLISHED, token_present=False).status is Status.OK


def _clock(values: list[float]) -> Callable[[], float]:
    it = iter(values)
    return lambda: next(it)


def test_clock_offset_is_measured_against_the_round_trip_midpoint() -> None:
    probe = Scripted({"date": ok("1000.50\nyes\n")})
    check = checks.check_clock(probe, _clock([1000.0, 1001.0]))
    assert check.status is Status.OK and "offset +0.00 s (±0.50)" in check.found
    skewed = checks.check_clock(Scripted({"date": ok("1010.0\n")}), _clock([1000.0, 1000.2]))
    assert skewed.status is Status.FAIL and "+9.90 s" in skewed.found
    unsynced = checks.check_clock(Scripted({"date": ok("1000.1\nno\n")}), _clock([1000.0, 1000.2]))
    assert unsynced.status is Status.WARN and "set-ntp" in unsynced.fix


def test_report_table_and_failure_name_the_checks() -> None:
    probe = Scripted(
        {
            "nvidia-smi": ok(TWO_A100),
            "docker info": ok("{}"),
            "date": ok("5.0\n"),
            "df -PB1": df(10**15),
            "du -sb": ok("0\n"),
        }
    )
    report = checks.run_preflight(
        probe,
        PUBLISHED,
        host="gpu01",
        ssh_found="root@h:22",
        model_cache="/m",
        hf_token_present=False,
        clock=_clock([5.0, 5.0]),
    )
    table = report.table()
    assert table.splitlines()[0].split()[:4] == ["check", "status", "found", "what"]
    assert [c.name for c in report.checks] == [
        "ssh",
        "docker",
        "GPUs",
        "GPU memory",
        "driver",
        "driver CUDA",
        "NVIDIA runtime",
        "memory",
        "disk",
        "weights",
        "HF token",
        "clock",
    ]
    with pytest.raises(HostCheckFailed) as info:
        report.raise_if_failed()
    assert "GPUs, GPU memory, driver, NVIDIA runtime" in info.value.one_line()


def test_shipped_requirements_load() -> None:
    req = load_requirements("published", 4)
    assert req.gpu_model == "RTX PRO 6000" and req.weights_bytes > 100 * GIB
    twin = load_requirements("twin", 0)
    assert twin.gpus == 0 and twin.weights_bytes == 0


# --- the driver's CUDA ceiling against the image's NVIDIA_REQUIRE_CUDA (issue 22) ---------

SMI_HEADER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver}             Driver Version: {driver}     CUDA Version: {cuda}     |
+-----------------------------------------------------------------------------------------+
"""
CUDA_132_ENV = json.dumps(
    ["PATH=/usr/bin", "NVIDIA_REQUIRE_CUDA=cuda>=13.2 brand=unknown,driver>=535,driver<536"]
)


def _smi(cuda: str) -> Callable[[str], CommandResult]:
    def answer(command: str) -> CommandResult:
        if "--query-gpu" in command:
            return ok(FOUR_PRO_6000)
        return ok(SMI_HEADER.format(driver="580.95.05", cuda=cuda))

    return answer


def _with_image_cuda(req: Requirements) -> Requirements:
    from dataclasses import replace

    from provisioning.image.cuda_compat import CudaRequirement

    return replace(req, image_cuda=CudaRequirement((13, 2), "Dockerfile CUDA_VERSION"))


def test_a_cuda_13_0_driver_is_refused_for_a_13_2_image_naming_the_driver_needed() -> None:
    probe = Scripted({"nvidia-smi": _smi("13.0")})
    check = gpu.check_driver_cuda(probe, _with_image_cuda(PUBLISHED), gpus_found=True)
    assert check.status is Status.FAIL
    assert check.found == (
        "driver supports CUDA 13.0; image needs >= 13.2 (Dockerfile CUDA_VERSION)"
    )
    assert check.fix == (
        "install an NVIDIA driver that supports CUDA 13.2 or newer "
        "(nvidia-smi must show CUDA Version >= 13.2)"
    )


@pytest.mark.parametrize("cuda", ["13.2", "13.3"])
def test_a_driver_that_reaches_the_images_cuda_passes(cuda: str) -> None:
    probe = Scripted({"nvidia-smi": _smi(cuda)})
    check = gpu.check_driver_cuda(probe, _with_image_cuda(PUBLISHED), gpus_found=True)
    assert check.status is Status.OK, check


def test_the_requirement_is_read_from_the_image_on_the_host_first() -> None:
    """An image on the host built on CUDA 13.2 requires 13.2 whatever the fallback says."""
    from dataclasses import replace

    from provisioning.image.cuda_compat import CudaRequirement

    req = replace(
        PUBLISHED, image_ref="bench-vllm:x", image_cuda=CudaRequirement((12, 0), "fallback")
    )
    probe = Scripted({"docker image inspect": ok(CUDA_132_ENV), "nvidia-smi": _smi("13.0")})
    check = gpu.check_driver_cuda(probe, req, gpus_found=True)
    assert check.status is Status.FAIL
    assert "image needs >= 13.2 (NVIDIA_REQUIRE_CUDA of bench-vllm:x on the host)" in check.found


def test_the_dockerfile_fallback_reads_the_dockerfiles_cuda() -> None:
    from provisioning.image import build, cuda_compat

    need = cuda_compat.from_dockerfile(build.DOCKERFILE)
    assert need is not None and need.version == (13, 2)


def test_nvidia_smi_without_a_cuda_version_fails_the_check() -> None:
    probe = Scripted({"nvidia-smi": ok(FOUR_PRO_6000)})
    check = gpu.check_driver_cuda(probe, _with_image_cuda(PUBLISHED), gpus_found=True)
    assert check.status is Status.FAIL and check.found == "nvidia-smi shows no CUDA Version"


# --- what the host's sshd allows (issue 18) ----------------------------------------------


class Caps:
    """A scripted sshd: its MaxSessions, and whether SFTP and TCP forwarding work."""

    def __init__(
        self, max_sessions: int = 10, sftp: str | None = None, fwd: str | None = None
    ) -> None:
        self.max_sessions, self.sftp, self.fwd = max_sessions, sftp, fwd

    def session_capacity(self, wanted: int) -> int:
        return min(wanted, self.max_sessions)

    def sftp_problem(self) -> str | None:
        return self.sftp

    def forwarding_problem(self) -> str | None:
        return self.fwd


def test_stock_sshd_limits_pass() -> None:
    found = checks.check_ssh_limits(Caps(), 4)
    assert [(c.name, c.status) for c in found] == [
        ("ssh sessions", Status.OK),
        ("sftp", Status.OK),
        ("port forwarding", Status.OK),
    ]


@pytest.mark.parametrize("max_sessions", [1, 2, 3])
def test_too_few_sessions_per_connection_is_refused_naming_max_sessions(max_sessions: int) -> None:
    check = checks.check_ssh_limits(Caps(max_sessions=max_sessions), 4)[0]
    assert check.status is Status.FAIL
    assert check.found == (f"sshd allows {max_sessions} session(s) per connection; the run needs 4")
    assert check.fix.startswith("set MaxSessions 4 or more in the host's sshd_config")


def test_no_sftp_is_named_as_such_not_as_a_dropped_host() -> None:
    check = checks.check_ssh_limits(Caps(sftp="Channel closed."), 4)[1]
    assert check.status is Status.FAIL
    assert check.found.startswith("no SFTP on the host (Channel closed.)")
    assert "Subsystem sftp" in check.fix


def test_refused_forwarding_is_named() -> None:
    check = checks.check_ssh_limits(Caps(fwd="Administratively prohibited"), 4)[2]
    assert check.status is Status.FAIL and "AllowTcpForwarding" in check.fix


# --- the host's memory (issue 30: the README said preflight checks it; nothing did) -------

MEMINFO_512 = "MemTotal:       528273644 kB\nMemFree:        1000 kB\nMemAvailable:   2000 kB\n"


def test_mem_total_is_read_in_range_or_not_at_all() -> None:
    assert memory.mem_total_bytes(MEMINFO_512) == 528273644 * 1024
    assert memory.mem_total_bytes("MemFree: 5 kB\n") is None
    assert memory.mem_total_bytes("MemTotal: 5 MB\n") is None
    assert memory.mem_total_bytes("MemTotal: -5 kB\n") is None
    assert memory.mem_total_bytes("MemTotal: \u0665 kB\n") is None  # an Arabic-Indic 5
    assert memory.mem_total_bytes("MemTotal: " + "9" * 40 + " kB\n") is None


def test_a_host_with_too_little_memory_fails_naming_what_the_profile_needs() -> None:
    req = load_requirements("published", 4)
    small = Scripted({"cat /proc/meminfo": ok("MemTotal:       131072000 kB\n")})
    check = memory.check_memory(small, req)
    assert check.status is Status.FAIL
    assert check.found.startswith("125 GiB; the published launch needs 256 GiB (the 230 GiB")
    big = memory.check_memory(Scripted({"cat /proc/meminfo": ok(MEMINFO_512)}), req)
    assert (big.status, big.found) == (Status.OK, "504 GiB (needs 256 GiB)")
    unread = memory.check_memory(Scripted({}), req)
    assert unread.status is Status.WARN and "256 GiB" in unread.fix


def test_docs_list_exactly_the_checks_preflight_makes() -> None:
    import re
    from pathlib import Path

    from bench.errors import BenchError

    text = (Path(__file__).parents[3] / "docs" / "provisioning.md").read_text()
    start = text.index("Every check preflight makes, in its order")
    listed = re.findall(r"`([^`]+)`", text[start : text.index("`memory` compares", start)])
    report = checks.ssh_failed_report("h", BenchError("x"))
    assert listed == [c.name for c in report.checks]
