"""The Router: finds every family's engines, asks each whether it serves a graph, ranks the ones that do.

Discovery (once per process, :func:`default_registry`), without core naming any family:

1. core's own reference engine (``cudnn.graph.reference:register``, also its wheel's entry point);
2. the ``cudnn.engines`` entry-point group of installed wheels (``<family> = "cudnn.<family>.engines:register"``);
3. every ``cudnn.<pkg>.engines`` module found by scanning the ``cudnn`` namespace's directories
   (``pkgutil`` over ``cudnn.__path__``): the GPU host runs from src trees on PYTHONPATH, where no entry
   point exists.

Each source's ``register(registry)`` runs once. A source whose import or ``register`` fails is absent; its
error is kept in ``registry.load_errors`` and reported when nothing serves a graph, next to every decline.

Ranking: kernel engines by ``priority`` (high first, then registration order); the reference engine
last, and for a graph whose device is CUDA or unknown it is offered only when asked for by name.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from typing import Any

from .engine import EngineRegistry
from .errors import cudnnGraphNotSupportedError

ENTRY_POINT_GROUP = "cudnn.engines"

_default: EngineRegistry | None = None
_default_lock = threading.Lock()

REFERENCE_ON_CUDA = (
    "the reference engine (pure PyTorch) serves a CUDA graph, or one whose device is unknown, only when asked for by name: "
    "graph.create_execution_plans([...], engines=['reference']) or graph.select_engines(['reference']) before it; "
    "a CPU graph (cudnn.pygraph(handle=cudnn.create_handle(device='cpu')) or tensor_like of CPU tensors) gets it by default"
)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _run_register(registry: EngineRegistry, source: str, loader) -> None:
    if source in registry.loaded_sources:
        return
    registry.loaded_sources.add(source)
    try:
        register = loader()
        register(registry)
    except Exception as exc:  # a broken family is absent; its error is reported later
        registry.load_errors[source] = _error_text(exc)


def _entry_points() -> list[Any]:
    from importlib import metadata

    try:
        return list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except TypeError:  # Python < 3.10 API
        return list(metadata.entry_points().get(ENTRY_POINT_GROUP, []))


def namespace_engine_modules(paths: list[str] | None = None) -> list[str]:
    """``cudnn.<pkg>.engines`` modules present in the ``cudnn`` namespace directories (nothing is imported)."""
    if paths is None:
        import cudnn

        paths = list(cudnn.__path__)
    found = []
    for info in pkgutil.iter_modules(paths):
        if not info.ispkg or info.name.startswith("_"):
            continue
        base = os.path.join(getattr(info.module_finder, "path", ""), info.name)
        if os.path.isfile(os.path.join(base, "engines.py")) or os.path.isfile(os.path.join(base, "engines", "__init__.py")):
            name = f"cudnn.{info.name}.engines"
            if name not in found:
                found.append(name)
    return found


def discover(registry: EngineRegistry | None = None, *, entry_points: bool = True, namespace: bool = True, paths: list[str] | None = None) -> EngineRegistry:
    """Fill ``registry`` (a new one by default) from the reference engine, entry points and the namespace scan."""
    registry = registry if registry is not None else EngineRegistry()
    _run_register(registry, "cudnn.graph.reference", lambda: importlib.import_module("cudnn.graph.reference").register)
    if entry_points:
        for ep in _entry_points():
            module = ep.value.split(":")[0].strip()
            _run_register(registry, module, ep.load)
    if namespace:
        for module in namespace_engine_modules(paths):
            _run_register(registry, module, lambda m=module: importlib.import_module(m).register)
    return registry


def default_registry(refresh: bool = False) -> EngineRegistry:
    """The process-wide registry, discovered on first use (``refresh=True`` discovers again)."""
    global _default
    with _default_lock:
        if _default is None or refresh:
            _default = discover()
        return _default


def _host_device(device: str | None) -> bool:
    return device is not None and not device.startswith("cuda")


def rank_engines(graph, registry: EngineRegistry, requested: list[str] | None = None, deselected: set[str] | frozenset = frozenset()):
    """``(accepted engines in rank order, {engine: decline reason})``; unknown requested names raise ValueError."""
    if requested is not None:
        unknown = [n for n in requested if n not in registry]
        if unknown:
            extra = f"; families that failed to import: {registry.load_errors}" if registry.load_errors else ""
            raise ValueError(f"unknown engine(s) {unknown}; registered engines: {registry.names()}{extra}")
    accepted, declines = [], {}
    for engine in registry.ranked():
        name = engine.name
        if requested is not None and name not in requested:
            continue
        if name in deselected:
            declines[name] = "deselected by deselect_engines()"
            continue
        if getattr(engine, "is_reference", False) and requested is None and not _host_device(graph.device):
            declines[name] = REFERENCE_ON_CUDA
            continue
        try:
            engine.check_support(graph)
        except NotImplementedError as exc:
            declines[name] = str(exc) or f"{name} declined"
            continue
        except Exception as exc:  # a malformed-for-this-engine value or a bug: report it, let other engines serve
            declines[name] = _error_text(exc)
            continue
        accepted.append(engine)
    return accepted, declines


def not_supported_error(graph, declines: dict[str, str], registry: EngineRegistry, what: str = "no engine serves") -> cudnnGraphNotSupportedError:
    """The error that lists every decline reason and every family that failed to import."""
    nodes = ", ".join(f"{n.kind} {n.name!r}" for n in graph.nodes) or "none"
    lines = [f"{what} graph {graph.name!r} (device {graph.device or 'unknown'}; nodes: {nodes})."]
    if declines:
        lines.append("engines that declined:")
        lines += [f"  - {name}: {reason}" for name, reason in declines.items()]
    else:
        lines.append(f"no engine was asked (registered: {registry.names() or 'none'}).")
    if registry.load_errors:
        lines.append("families whose engines failed to load (absent):")
        lines += [f"  - {source}: {err}" for source, err in registry.load_errors.items()]
    return cudnnGraphNotSupportedError("\n".join(lines), declines, registry.load_errors)
