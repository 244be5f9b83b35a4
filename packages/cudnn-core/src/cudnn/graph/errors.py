"""Errors of the graph API. Pure Python.

- :class:`GraphValidationError` (a ``ValueError``): the graph is malformed (shape or dtype inference
  failed, a required attribute is missing); raised by ``validate`` and by the node builders, naming the
  node and the tensor.
- :class:`cudnnGraphNotSupportedError` (a ``NotImplementedError``; upstream's name): no engine serves
  the graph; the message lists every engine's decline reason and every family that failed to import.
- Bad execute arguments (variant pack, workspace, overrides) raise ``ValueError`` / ``TypeError``.
"""

from __future__ import annotations


class GraphValidationError(ValueError):
    """The graph is malformed: the message names the node and the tensor."""


class cudnnGraphNotSupportedError(NotImplementedError):  # noqa: N801 - upstream's spelling
    """No engine serves the graph (each engine's reason is in the message, and in ``declines``)."""

    def __init__(self, message: str, declines: dict[str, str] | None = None, import_errors: dict[str, str] | None = None):
        super().__init__(message)
        self.declines = dict(declines or {})
        self.import_errors = dict(import_errors or {})


GraphNotSupportedError = cudnnGraphNotSupportedError
