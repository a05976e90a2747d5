"""Loading sweep files for the CLI: strict loading, expansion, one clean error for any problem."""

from __future__ import annotations

from pathlib import Path

from gatedmodels.configbase import ConfigError

from .common import UserError, load_yaml


def load_and_expand(path: str | Path, *, smoke: bool = False):
    """(spec, expansion) of a sweep file, or UserError listing every problem with the file name."""
    from ..sweep import SweepSpec, apply_smoke, expand

    data = load_yaml(path)
    try:
        spec = SweepSpec.from_dict(data)
    except ConfigError as err:
        raise UserError(err.with_source(str(path)).render()) from None
    if smoke:
        spec = apply_smoke(spec)
    try:
        expansion = expand(spec, source=path)
    except ConfigError as err:
        raise UserError(err.with_source(str(path)).render()) from None
    if not expansion.trials:
        raise UserError(f"{path}: the sweep has no trials left ({expansion.cells} cells, {expansion.excluded} excluded)")
    return spec, expansion


def is_sweep_file(data: dict) -> bool:
    return "name" in data or any(k in data for k in ("base", "grid", "zip", "search"))
