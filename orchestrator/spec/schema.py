"""JSON Schema of sweep files and trial configs, generated from the typed dataclasses (the same
types and field docstrings the strict loader uses), so editors can complete sweep files:

    gatesweep schema > gatesweep.schema.json
    # VS Code (YAML extension): "yaml.schemas": {"./gatesweep.schema.json": "sweeps/*.yaml"}
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, get_args, get_origin

from gatedmodels.typedconfig import Config, hints
from orchestrator.spec.sweep import SweepSpec
from orchestrator.spec.trial import SECTIONS, TrialConfig


def type_schema(tp: Any) -> dict:
    origin = get_origin(tp)
    if tp is Any:
        return {}
    if origin is Literal:
        return {"enum": list(get_args(tp))}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [type_schema(a) for a in get_args(tp)]}
    if origin in (list, tuple):
        args = get_args(tp)
        return {"type": "array", **({"items": type_schema(args[0])} if args else {})}
    if origin is dict:
        args = get_args(tp)
        return {"type": "object", **({"additionalProperties": type_schema(args[1])} if args else {})}
    if tp is type(None):
        return {"type": "null"}
    if isinstance(tp, type) and issubclass(tp, Config):
        return config_schema(tp)
    # numbers may be written as strings such as "1e-3" (YAML 1.1)
    leaves: dict[type, dict] = {
        bool: {"type": "boolean"},
        int: {"type": "integer"},
        float: {"type": ["number", "string"]},
        str: {"type": "string"},
    }
    return leaves.get(tp, {})


def config_schema(cls: type[Config]) -> dict:
    docs = cls.field_docs()
    field_hints = hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):
        s = dict(type_schema(field_hints[f.name]))
        if f.name in docs:
            s["description"] = docs[f.name]
        if f.default is not dataclasses.MISSING and isinstance(f.default, (str, int, float, bool)):
            s["default"] = f.default
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
        props[f.name] = s
    out = {"type": "object", "properties": props, "additionalProperties": False}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    if required:
        out["required"] = required
    return out


def trial_schema() -> dict:
    s = config_schema(TrialConfig)
    s["properties"]["model"]["properties"]["size"]["description"] += " Presets: see `gatedmodels.PRESETS`."
    return s


def sweep_schema() -> dict:
    s = config_schema(SweepSpec)
    base = trial_schema()
    base["properties"].pop("tracking", None)
    s["properties"]["base"] = {**base, "description": "A trial config, as for `gatesweep train`."}
    axis = {"type": "array", "minItems": 1}
    pattern = r"^(" + "|".join(SECTIONS) + r")\.[A-Za-z0-9_.]+$"
    s["properties"]["grid"].update({"type": "object", "propertyNames": {"pattern": pattern}, "additionalProperties": axis})
    s["properties"]["zip"]["items"] = {"type": "object", "propertyNames": {"pattern": pattern}, "additionalProperties": axis}
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "gatesweep sweep file"
    return s
