"""What a run records about the code that made it: package versions and the git commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
