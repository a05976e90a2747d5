"""The sweep's state folder: RUNS/sweeps/NAME/ with state.json (the parent run, each trial's run
id and checkpoint folder, the local Ray of a running driver), the stored sweep file, driver.lock
and one folder per trial. state.json is written atomically and validated when read back.

RUNS is a `Location` (a local folder or an object-store prefix, parsed once at the CLI); on a
store, state.json is one PUT (whole or absent), retried through an outage (`storage.retry`).
The stored sweep file is always STATE/sweep.yaml: a path the state file names is not followed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from orchestrator import storage
from orchestrator.core.errors import UserError
from orchestrator.storage import Location
from orchestrator.storage.retry import retried

MAX_STATE_BYTES = 256 << 20
"""state.json holds a few hundred bytes per trial: 256 MiB is far beyond any sweep's."""


def sweep_dir(runs_root: Location, name: str) -> Location:
    return runs_root.child("sweeps", name)


def load_state(loc: Location) -> dict:
    """The sweep's state.json ({} when there is none); UserError in one line when it is damaged."""
    if loc.local is None:
        return _load_remote(loc.child("state.json"), loc.name)
    f = loc.local / "state.json"
    if not f.exists() and not f.is_symlink():
        return {}
    if f.is_symlink() or not f.is_file() or f.stat().st_size > MAX_STATE_BYTES:  # a device or a pipe would be read forever
        what = (
            "not a regular file"
            if not f.is_file()
            else "a link, not the state a driver wrote"
            if f.is_symlink()
            else f"{f.stat().st_size:,} bytes, more than {MAX_STATE_BYTES:,}"
        )
        raise UserError(f"{f}: damaged sweep state ({what}); restore it or launch the sweep again with `gatesweep run`")
    return _parse(f, f.read_bytes(), loc.name)


def _load_remote(f: Location, name: str) -> dict:
    try:
        data = retried(lambda: f.read_bytes(MAX_STATE_BYTES), f"reading {f}")
    except FileNotFoundError:
        return {}
    except ValueError as err:
        raise UserError(f"{f}: damaged sweep state ({err}); restore it or launch the sweep again with `gatesweep run`") from None
    except OSError as err:
        raise UserError(f"{f}: the sweep state cannot be read ({str(err).strip()[:200]})") from None
    return _parse(f, data, name)


def _parse(f, data: bytes, name: str) -> dict:
    try:
        state = json.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserError(
            f"{f}: damaged sweep state ({type(err).__name__}: {str(err)[:120]}); "
            "restore it from a backup or launch the sweep again with `gatesweep run`"
        ) from None
    problem = _state_problem(state)
    if not problem and state.get("name") != name:
        problem = f"it names sweep {str(state.get('name'))[:60]!r}, not the folder's {name!r}"
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


def save_state(loc: Location, state: dict) -> None:
    if loc.local is not None:
        loc.local.mkdir(parents=True, exist_ok=True)
        storage.write_json(loc.local / "state.json", state, indent=2)
        return
    f = loc.child("state.json")
    retried(lambda: f.write_json(state, indent=2), f"writing {f}")


def store_sweep_file(loc: Location, source: Path) -> Location:
    """Copy the sweep file `source` to the state folder's sweep.yaml (what a resume reads); return it."""
    stored = loc / "sweep.yaml"
    if stored.local is not None:
        stored.local.parent.mkdir(parents=True, exist_ok=True)
        if source != stored.local.resolve():
            shutil.copyfile(source, stored.local)
    else:
        data = source.read_bytes()
        retried(lambda: stored.write_bytes(data), f"writing {stored}")
    return stored
