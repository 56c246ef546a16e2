"""The help text of each configuration field: the docstring under it in
:class:`~kinesis_spout.config.model.SpoutConfig`, read from the class's source (so the
field, its default and its help are written once, side by side)."""

from __future__ import annotations

import ast
import inspect

from kinesis_spout.config.model import SpoutConfig


def field_docs() -> dict[str, str]:
    """The docstring under each field of :class:`SpoutConfig` (for ``--help``)."""
    try:
        tree = ast.parse(inspect.getsource(SpoutConfig))
    except (OSError, TypeError, SyntaxError):  # no source (frozen app): no help texts
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


FIELD_DOCS: dict[str, str] = field_docs()
"""Field name -> its help text (empty without the source: a frozen app)."""
