"""tests/gpu/check_vllm.sh cannot run here (no GPU): its skip path is what every test run checks. It must
exit 0 with one "skipped: ..." line where nvidia-smi is missing, where it lists no GPU, and (given a
GPU) where vLLM or the local model is missing -- never a traceback, never a run started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "gpu" / "check_vllm.sh"


def check(tmp_path, bin_dir: Path, **env) -> subprocess.CompletedProcess:
    # PATH: the stand-ins only, then the system's basic tools (bash, grep), never the venv's vllm
    path = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    full = {
        "PATH": path,
        "HOME": str(tmp_path),
        "PYTHON": sys.executable,
        "HARNESS_GPU_OUT": str(tmp_path / "out"),
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=full)


def tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / name).chmod(0o755)


def skipped(proc, reason: str, tmp_path) -> None:
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and proc.stderr == "", (proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("skipped: ") and reason in lines[0], lines
    assert not (tmp_path / "out").exists()  # nothing was run


@pytest.mark.skipif(
    Path("/usr/bin/nvidia-smi").exists() or Path("/bin/nvidia-smi").exists(), reason="a real nvidia-smi"
)
def test_without_nvidia_smi_it_skips(tmp_path):
    skipped(check(tmp_path, tmp_path / "bin"), "no GPU (nvidia-smi not found)", tmp_path)


def test_a_machine_without_a_gpu_or_vllm_or_model_skips(tmp_path):
    bin_dir = tmp_path / "bin"
    tool(bin_dir, "nvidia-smi", "echo 'No devices were found'; exit 6")
    skipped(check(tmp_path, bin_dir), "nvidia-smi lists none", tmp_path)
    tool(bin_dir, "nvidia-smi", "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'")
    # a Python without vllm beside it and none on PATH
    skipped(check(tmp_path, bin_dir), "no vllm", tmp_path)
    tool(bin_dir, "vllm", "exit 1")
    skipped(check(tmp_path, bin_dir), "no local model", tmp_path)
    skipped(check(tmp_path, bin_dir, HARNESS_GPU_MODEL=str(tmp_path / "nowhere")), "no local model", tmp_path)
