"""PEP 562 lazy exports shared by ``cudnn`` and every family package.

A table maps an exported name to ``(module, attribute)``. On first access the module is imported and
the value is cached on the package. Failures become an ``ImportError`` that names what is missing: the
family wheel to install, or the framework (torch, cuda-python) the symbol needs. A family gates its
CuTe DSL floor here before importing a module that needs the DSL (Rule 7).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .dsl_gate import require_cutedsl

#: Top-level modules a symbol may need, and what to install for each.
_FRAMEWORK_HINTS = {
    "torch": "torch (pip install torch)",
    "cutlass": "the CuTe DSL (pip install nvidia-cutlass-dsl)",
    "cuda": "cuda-python (pip install cuda-python)",
    "tvm_ffi": "apache-tvm-ffi (pip install apache-tvm-ffi)",
}


def _missing_framework(exc: ModuleNotFoundError) -> str | None:
    root = (exc.name or "").split(".")[0]
    return _FRAMEWORK_HINTS.get(root)


def resolve(package: str, name: str, table: dict[str, tuple[str, str]], wheel: str, dsl_floor: str | None = None, needs_dsl: frozenset = frozenset()) -> Any:
    """Import and return ``table[name]`` for ``package``; cache it on the package module."""
    try:
        module_name, attr = table[name]
    except KeyError:
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
    if dsl_floor is not None and name in needs_dsl:
        require_cutedsl(f"{package}.{name}", dsl_floor)
    try:
        module = importlib.import_module(module_name, package)
    except ModuleNotFoundError as exc:
        framework = _missing_framework(exc)
        if framework is not None:
            raise ImportError(f"{package}.{name} needs {framework}; it is not installed (the {wheel} wheel itself is).") from exc
        missing = exc.name or ""
        family_root = ".".join(module_name.split(".")[:2]) if module_name.startswith("cudnn.") else None
        if family_root is not None and missing == family_root:
            raise ImportError(f"{package}.{name} lives in the {wheel} wheel, which is not installed: pip install {wheel}") from exc
        raise
    value = getattr(module, attr) if attr else module
    setattr(sys.modules[package], name, value)
    return value


def install_family(namespace: dict, table: dict[str, tuple[str, str]], wheel: str, dsl_floor: str, needs_dsl: frozenset = frozenset()) -> None:
    """Give a family package (its ``globals()``) the PEP 562 ``__getattr__``, ``__dir__`` and ``__all__`` over ``table``."""
    package = namespace["__name__"]

    def module_getattr(name: str):
        return resolve(package, name, table, wheel, dsl_floor, needs_dsl)

    def module_dir():
        return sorted(set(namespace) | set(table))

    namespace.update(__getattr__=module_getattr, __dir__=module_dir, __all__=list(table))
