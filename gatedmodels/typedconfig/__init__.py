"""typedconfig: the typed-dataclass config framework every gatesweep config is built on (torch-free).

    from gatedmodels.typedconfig import Config, ConfigError, Issue

- `base`: the `Config` base (strict `from_dict`, `to_dict`, `flatten`, field docs, bounds).
- `coercion`: one user value checked against a field's annotation.
- `errors`: `Issue`, `ConfigError` and the short renderings messages use (`show`, ranges).
- `dicts`: dotted keys and deep merges of plain dicts.
- `fielddocs`: the docstrings written under dataclass fields.

It imports nothing from the rest of gatedmodels (an import contract in pyproject.toml holds it).
"""

from .base import INT64, Config, Limits, field_type, hints
from .dicts import deep_merge, flatten_dict, get_dotted, set_dotted
from .errors import MAX_ISSUES, ConfigError, Issue, describe_range, did_you_mean, show

__all__ = [
    "INT64",
    "MAX_ISSUES",
    "Config",
    "ConfigError",
    "Issue",
    "Limits",
    "deep_merge",
    "describe_range",
    "did_you_mean",
    "field_type",
    "flatten_dict",
    "get_dotted",
    "hints",
    "set_dotted",
    "show",
]
