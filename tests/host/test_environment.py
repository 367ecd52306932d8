"""Environment capture: launch argv from /proc or as given, with every secret redacted."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.host import environment as envmod
from bench.host.inventory import GpuInventory
from bench.settings import load_settings

R = envmod.REDACTED
PUBLISHED = (
    '"$HOME/env/bin/vllm" serve Qwen/Qwen3.5-397B-A17B-GPTQ-Int4 --served-model-name qwen '
    "--tensor-parallel-size 4 --max-model-len 262144 --max-num-batched-tokens 8192 "
    "--tokenizer Qwen/Qwen3.5 --api-key sk-published-secret --attention-backend FLASH_ATTN "
    '--speculative-config \'{"method":"mtp","num_speculative_tokens":2}\''
)


def test_published_launch_keeps_every_flag_but_the_key() -> None:
    argv = shlex.split(PUBLISHED)
    out = envmod.redact_argv(argv)
    assert "sk-published-secret" not in " ".join(out)
    assert out[out.index("--api-key") + 1] == R
    # Same length, every other word untouched (numbers, tokenizer, JSON config).
    assert len(out) == len(argv)
    assert [w for w in out if w != R] == [w for w in argv if w != "sk-published-secret"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--api-key=abc123"], [f"--api-key={R}"]),
        (["--hf-token", "hf_abcdef", "--port", "8000"], ["--hf-token", R, "--port", "8000"]),
        (["--api-key", "k1", "k2", "--port", "1"], ["--api-key", R, R, "--port", "1"]),
        (["--db_password", "pw"], ["--db_password", R]),
        (
            ["VLLM_API_KEY=sk-1", "HF_TOKEN=hf_2", "VLLM_PORT=1"],
            [f"VLLM_API_KEY={R}", f"HF_TOKEN={R}", "VLLM_PORT=1"],
        ),
        (["--url", "https://user:hunter2@host/x"], ["--url", f"https://user:{R}@host/x"]),
        (["--max-num-batched-tokens", "8192"], ["--max-num-batched-tokens", "8192"]),
        (["--ssl-keyfile", "/k.pem"], ["--ssl-keyfile", "/k.pem"]),
    ],
)
def test_argv_redaction(argv: list[str], expected: list[str]) -> None:
    assert envmod.redact_argv(argv) == expected


def test_env_keeps_serving_families_and_redacts_secret_names() -> None:
    env = {
        "VLLM_API_KEY": "sk-1",
        "HF_TOKEN": "hf_2",
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "DATABASE_URL": "postgres://u:pw@db/x",
        "HOME": "/root",
    }
    assert envmod.redact_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "HF_TOKEN": R,
        "VLLM_API_KEY": R,
        "VLLM_CPU_KVCACHE_SPACE": "2",
    }


_SERVER = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
sys.stdin.read()
"""


@pytest.mark.integration
def test_launch_read_from_proc_of_the_process_listening_on_the_port() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, "serve", "tiny", "--api-key", "sk-on-argv-123"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"VLLM_API_KEY": "sk-in-env-456", "VLLM_LOGGING_LEVEL": "INFO", "PATH": "/usr/bin"},
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        pid = envmod.listening_pid(port)
        assert pid == proc.pid
        launch = envmod.launch_from_proc(pid)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert launch.source == "proc"
    assert launch.argv[-4:] == ("serve", "tiny", "--api-key", R)
    assert launch.env == {"VLLM_API_KEY": R, "VLLM_LOGGING_LEVEL": "INFO"}
    assert "sk-" not in launch.model_dump_json()


def test_no_listener_means_launch_as_given(tmp_path: Path) -> None:
    assert envmod.listening_pid(1, proc=tmp_path) is None  # no /proc/net tables at all
    launch = envmod.launch_given(["vllm", "serve", "m", "--api-key", "x" * 10])
    assert launch.source == "given" and launch.argv == ("vllm", "serve", "m", "--api-key", R)
    assert envmod.launch_given(None).source == "unknown"


def _fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "proc" / "1").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "proc" / "meminfo").write_text("MemTotal:       263856128 kB\nMemFree: 1 kB\n")
    (root / "proc" / "cpuinfo").write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 9354 32-Core Processor\n"
    )
    (root / "proc" / "1" / "cgroup").write_text("0::/system.slice/docker-0123abcd.scope\n")
    (root / "etc" / "os-release").write_text('PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\n')
    return root


def test_capture_records_host_image_and_redacted_settings(tmp_path: Path) -> None:
    root = _fake_root(tmp_path)
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"org.opencontainers.image.revision": "73a5831127a9"}))
    settings = load_settings({"BENCH_API_KEY": "sk-settings-789"})
    env = envmod.capture(
        settings,
        now=datetime(2026, 12, 2, 11, 30, tzinfo=UTC),
        given_argv=["vllm", "serve", "qwen", "--api-key", "sk-settings-789"],
        vllm_version="0.30.1rc1.dev452+g73a583112",
        image_digest="sha256:" + "ab" * 32,
        image_labels_file=labels,
        gpu_inventory=GpuInventory(available=False, reason="nvidia-smi not found on PATH"),
        root=root,
    )
    dumped = env.model_dump_json()
    assert "sk-settings-789" not in dumped
    assert env.bench.settings["api_key"] == R
    assert env.host.memory_total_bytes == 263856128 * 1024
    assert env.host.cpu_model == "AMD EPYC 9354 32-Core Processor"
    assert env.host.os == "Ubuntu 24.04.1 LTS"
    assert env.image.in_container and env.image.digest == "sha256:" + "ab" * 32
    assert env.image.labels == {"org.opencontainers.image.revision": "73a5831127a9"}
    assert env.gpu.reason == "nvidia-smi not found on PATH"
    written = envmod.write(tmp_path, env)
    assert json.loads(written.read_text())["launch"]["argv"][-1] == R


def test_not_in_a_container_without_markers(tmp_path: Path) -> None:
    root = _fake_root(tmp_path)
    (root / "proc" / "1" / "cgroup").write_text("0::/init.scope\n")
    assert not envmod.image_info(root, None, None).in_container


def test_cli_takes_the_vllm_version_from_the_runs_results(tmp_path: Path) -> None:
    from bench import cli

    (tmp_path / "results.json").write_text(json.dumps({"server": {"version": "0.32.0"}}))
    argv = [
        "environment",
        "--out",
        str(tmp_path),
        "--launch-argv",
        "vllm serve m --api-key sk-1234567",
    ]
    assert cli.main(argv) == 0
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["vllm_version"] == "0.32.0"
    assert env["launch"] == {
        "source": "given", "pid": None, "argv": ["vllm", "serve", "m", "--api-key", R],
        "env": {}, "note": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("url", "port"),
    [
        ("http://127.0.0.1:8000", 8000),
        ("http://localhost", 80),
        ("https://localhost/v1", 443),
        ("http://gpu01:8000", None),
        ("http://10.0.0.5:8000", None),
    ],
)
def test_only_a_local_server_has_a_port_to_look_up(url: str, port: int | None) -> None:
    assert envmod.local_port(url) == port


def test_the_images_self_test_facts_travel_into_the_environment(tmp_path: Path) -> None:
    """The vllm image writes /opt/bench/image.json at build time (torch's CUDA, FlashInfer);
    environment.json carries it, so every bundle says what the server's image held."""
    root = _fake_root(tmp_path)
    facts = {"cuda": {"torch_cuda": "13.2", "flashinfer_python": "0.6.18.post1"}}
    (root / "opt" / "bench").mkdir(parents=True)
    (root / "opt" / "bench" / "image.json").write_text(json.dumps(facts))
    assert envmod.image_info(root, None, None).selftest == facts
    (root / "opt" / "bench" / "image.json").write_text("[1, 2]")  # not an object: ignored
    assert envmod.image_info(root, None, None).selftest is None
    (root / "opt" / "bench" / "image.json").write_text("x" * (65 * 1024))  # over the bound
    assert envmod.image_info(root, None, None).selftest is None


@pytest.mark.parametrize("twin", [False, True])
def test_the_cli_records_benchs_freeze_and_for_the_twin_that_no_weights_are_loaded(
    tmp_path: Path, twin: bool
) -> None:
    """Issue 16: bench's own packages (the twin's server packages, since it runs in this
    Python), and for a twin run a weights record that says none are loaded."""
    import importlib.metadata

    from bench import cli

    server: dict[str, object] = {"version": "0.32.0"}
    if twin:
        server["version_payload"] = {"twin": {"profile": "tiny", "speed": 10, "seed": 0}}
    (tmp_path / "results.json").write_text(json.dumps({"server": server}))
    assert cli.main(["environment", "--out", str(tmp_path), "--launch-argv", "x"]) == 0
    env = json.loads((tmp_path / "environment.json").read_text())
    packages = env["bench"]["packages"]
    assert packages["pydantic"] == importlib.metadata.version("pydantic")
    assert list(packages) == sorted(packages)
    if twin:
        assert env["weights"] == {
            "model": None, "revision": None, "pinned": None, "files": {},
            "note": "not applicable: the twin loads no weights",
        }  # fmt: skip
    else:
        assert env["weights"] is None  # the orchestrator records them, when it ran the server
