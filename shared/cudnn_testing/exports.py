"""Detector for the import-order trap: an exported callable must survive its implementation modules
being imported before or after it (Python binds an imported submodule on its parent, bypassing PEP 562)."""

from __future__ import annotations

import importlib
import pkgutil
import types

from cudnn.dsl_gate import CuteDslVersionError


def lazy_table(package) -> dict[str, tuple[str, str]]:
    table = getattr(package, "_LAZY", None)
    if table is None:  # the top-level cudnn table carries the wheel as a third field
        table = {k: (m, a) for k, (m, a, _w) in getattr(package, "_LAZY_OPTIONAL_IMPORTS", {}).items()}
    return table


def check_exports_survive_import_order(package_name: str, order: str) -> list[str]:
    """Import in ``order`` ("modules-first" or "symbols-first") and return the exports that ended up
    as modules (or vanished). Submodules that cannot import here (a missing framework, a DSL below the
    family floor) are skipped; they cannot shadow anything."""
    package = importlib.import_module(package_name)
    table = lazy_table(package)
    problems: list[str] = []

    def import_all_submodules():
        for info in pkgutil.walk_packages(package.__path__, package_name + ".", onerror=lambda _name: None):
            try:
                importlib.import_module(info.name)
            except Exception:
                pass

    def resolve_all():
        out = {}
        for name, (_module, attr) in table.items():
            if not attr:
                continue  # the export IS a module (a family subpackage)
            try:
                out[name] = getattr(package, name)
            except (ImportError, CuteDslVersionError):
                continue  # not installable here, or the lane's DSL is below the family floor
        return out

    if order == "modules-first":
        import_all_submodules()
        values = resolve_all()
    elif order == "symbols-first":
        values = resolve_all()
        import_all_submodules()
        values = {name: getattr(package, name) for name in values}
    else:
        raise ValueError(order)
    for name, value in values.items():
        if isinstance(value, types.ModuleType):
            problems.append(f"{package_name}.{name} is the module {value.__name__}, not the exported callable")
    return problems
