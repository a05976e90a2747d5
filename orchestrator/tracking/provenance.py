"""What a run records about the code and the machine that made it: package versions, the git
commit, and the numeric environment (what decides the rounding of its floating-point results)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from . import names

PACKAGES = ("gatesweep", "torch", "deepspeed", "ray", "mlflow", "optuna", "datasets")


def package_versions() -> dict[str, str]:
    """Installed version of each of PACKAGES (the missing ones left out)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def git_state() -> dict[str, str]:
    """Commit and dirty flag of the gatesweep checkout, when it is one."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return {}
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=5
        )
        return {"git.commit": commit.stdout.strip(), "git.dirty": str(bool(dirty.stdout.strip())).lower()}
    except (OSError, subprocess.SubprocessError):
        return {}


# ---- the numeric environment ------------------------------------------------------------------
NUMERICS_ENV = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "NVIDIA_TF32_OVERRIDE",
    "CUBLAS_WORKSPACE_CONFIG",
)
"""Environment variables that change which kernels torch, MKL, oneDNN or cuBLAS run, and so the rounding."""
_CPU_NAME_KEYS = ("model name", "Model", "cpu model", "Hardware", "Processor")


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The processor's name from /proc/cpuinfo (x86 `model name`, Arm `Model`/`Hardware`), else
    the platform's; "unknown" when neither says."""
    import platform

    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in _CPU_NAME_KEYS and value.strip():
            return " ".join(value.split())[:200]
    return platform.processor() or platform.machine() or "unknown"


def _libraries(config: str) -> dict[str, str]:
    """MKL's and oneDNN's versions from torch's build description (what is linked into torch)."""
    out = {}
    for name, pattern in (("mkl", r"Math Kernel Library Version (\S+)"), ("onednn", r"(?:MKL-DNN|oneDNN) v(\S+)")):
        found = re.search(pattern, config)
        if found:
            out[name] = found.group(1)
    return out


def numerics() -> dict[str, Any]:
    """What decides a trial's floating-point rounding besides its config and seed, in this process
    now (after the trial set its thread count): the processor, the instruction set torch's CPU
    kernels run with (`ATEN_CPU_CAPABILITY` can lower it), torch's intra-op threads, torch and the
    MKL and oneDNN inside it, on a GPU its name, CUDA, cuDNN and the TF32 switches, and any of
    `NUMERICS_ENV` that is set. Two runs of one config and seed with equal values repeat bit for bit
    (measured: docs/training.md#repeatability)."""
    import torch

    out: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **_libraries(torch.__config__.show()),
    }
    if torch.cuda.is_available():
        out.update(
            gpu=torch.cuda.get_device_name(torch.cuda.current_device()),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
            tf32_cudnn=torch.backends.cudnn.allow_tf32,
        )
    env = {k: os.environ[k] for k in NUMERICS_ENV if k in os.environ}
    if env:
        out["env"] = env
    return out


def numerics_key(description: dict[str, Any]) -> str:
    """A short hash of a `numerics()` description: equal keys, equal rounding."""
    return hashlib.sha256(json.dumps(description, sort_keys=True, default=str).encode()).hexdigest()[:12]


def numerics_tags(description: dict[str, Any], before: dict[str, str] | None = None) -> dict[str, str]:
    """`names.NUMERICS_TAG` and `names.NUMERICS_KEY_TAG` for a run trained under `description`.
    `before`: the run's tags when it is reopened (a retry, a resume); if it trained under another
    environment until now, the run is marked mixed (`{"mixed": [earlier, ..., now]}`, the keys
    joined by `+`): its numbers repeat neither environment's."""
    key = numerics_key(description)
    old_key = (before or {}).get(names.NUMERICS_KEY_TAG)
    if not old_key or old_key == key or old_key.endswith("+" + key):
        if old_key and old_key != key:  # mixed already, and still under the last environment
            return {names.NUMERICS_TAG: (before or {})[names.NUMERICS_TAG], names.NUMERICS_KEY_TAG: old_key}
        return {names.NUMERICS_TAG: json.dumps(description, sort_keys=True), names.NUMERICS_KEY_TAG: key}
    try:
        earlier = json.loads((before or {}).get(names.NUMERICS_TAG, ""))
    except ValueError:
        earlier = None
    history = earlier["mixed"] if isinstance(earlier, dict) and isinstance(earlier.get("mixed"), list) else [earlier]
    return {names.NUMERICS_TAG: json.dumps({"mixed": [*history, description]}, sort_keys=True), names.NUMERICS_KEY_TAG: f"{old_key}+{key}"}


def numerics_label(tag: str) -> str:
    """A `names.NUMERICS_TAG` value in a few words: `AMD EPYC, AVX512, 1 thread, torch 2.13.0+cpu`
    (with the GPU first on one, and the environment variables that changed kernels); a damaged
    value says so."""
    try:
        d = json.loads(tag)
    except ValueError:
        d = None
    if isinstance(d, dict) and isinstance(d.get("mixed"), list):
        return "resumed under another environment: " + "; then ".join(numerics_label(json.dumps(m)) for m in d["mixed"])
    if not isinstance(d, dict):
        return "unreadable record"
    threads = d.get("threads")
    parts = [
        str(d["gpu"]) if d.get("gpu") else "",
        str(d.get("cpu", "?processor")),
        str(d.get("cpu_isa", "?instruction set")),
        f"{'?' if threads is None else threads} thread{'' if threads == 1 else 's'}",
        f"torch {d.get('torch', '?')}",
    ]
    env = d.get("env")
    if isinstance(env, dict) and env:
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(env.items())))
    return ", ".join(p for p in parts if p)
