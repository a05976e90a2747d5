"""The sweep's state folder: RUNS/sweeps/NAME/ with state.json (the parent run, each trial's run
id and checkpoint folder, the local Ray of a running driver), the stored sweep file, driver.lock
and one folder per trial. state.json is written atomically and validated when read back."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator import storage
from orchestrator.spec.files import UserError


def sweep_dir(runs_root: Path, name: str) -> Path:
    return Path(runs_root).resolve() / "sweeps" / name


def load_state(path: Path) -> dict:
    """The sweep's state.json ({} when there is none); UserError in one line when it is damaged."""
    f = path / "state.json"
    if not f.exists():
        return {}
    try:
        state = json.loads(f.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserError(
            f"{f}: damaged sweep state ({type(err).__name__}: {str(err)[:120]}); "
            "restore it from a backup or launch the sweep again with `gatesweep run`"
        ) from None
    problem = _state_problem(state)
    if problem:
        raise UserError(f"{f}: damaged sweep state ({problem}); restore it or launch the sweep again with `gatesweep run`")
    return state


def _state_problem(state) -> str:
    if not isinstance(state, dict):
        return f"expected a JSON object, got {type(state).__name__}"
    for key in ("name", "parent_run_id", "sweep_file"):
        if key in state and not isinstance(state[key], str):
            return f"{key!r} is {type(state[key]).__name__}, expected a string"
    for key in ("name", "parent_run_id"):
        if key not in state:
            return f"{key!r} is missing"
    trials = state.get("trials", {})
    if not isinstance(trials, dict):
        return f"'trials' is {type(trials).__name__}, expected an object"
    for h, t in trials.items():
        if not isinstance(t, dict) or not all(isinstance(t.get(k), (str, type(None))) for k in ("run_id", "name", "run_dir")):
            return f"trial {str(h)[:16]!r} is malformed"
    pids = state.get("ray_pids", [])
    if not isinstance(pids, list) or not all(isinstance(x, list) and len(x) == 2 for x in pids):
        return "'ray_pids' is malformed"
    for key in ("driver_pid",):
        if key in state and not isinstance(state[key], int):
            return f"{key!r} is {type(state[key]).__name__}, expected an integer"
    return ""


def save_state(path: Path, state: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    storage.write_json(path / "state.json", state, indent=2)
