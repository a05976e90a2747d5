"""Field docs extraction: the docstring written directly under each annotated field of a class
(the litgpt / OLMo-core style), read from the class's source with `ast`. `Config.field_docs` walks
the dataclasses of a config's MRO through it, for JSON Schema descriptions and help text."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import cast


def docs_under_fields(klass: type) -> dict[str, str]:
    """Field name -> its docstring (whitespace folded) in the source of `klass` itself, not of its
    bases; empty when the source cannot be read (a class built at run time, a frozen program)."""
    docs: dict[str, str] = {}
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return docs
    body = cast(ast.ClassDef, ast.parse(source).body[0]).body  # the source of a class is its class statement
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
