"""CuTe DSL version gate (Rule 7). Imports no ``cutlass``: the version is read from package metadata.

The pip floor of every wheel (``nvidia-cutlass-dsl>=4.6.2``) is the downstream floor, not what a kernel
needs. Each family declares its runtime floor; the entry a caller hits (a family's lazy import, an
adapter's ``check_support``, an engine's ``check_support``) calls :func:`require_cutedsl` before it imports
a kernel module, so a too-old DSL surfaces as :class:`CuteDslVersionError` naming both versions, never
as an ``AttributeError`` from inside the DSL or as an install hint.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

DSL_DISTRIBUTION = "nvidia-cutlass-dsl"

#: The lowest DSL any wheel installs next to (quack-kernels / vLLM / SGLang inherit it).
PIP_FLOOR = "4.6.2"


class CuteDslVersionError(NotImplementedError):
    """The installed CuTe DSL is missing or older than what a kernel needs.

    A ``NotImplementedError`` (hence also a ``RuntimeError``): raised from ``check_support`` it is a decline,
    so the Router moves on to the next engine and lists the reason."""


@dataclass(frozen=True)
class CuteDslState:
    """What is installed: ``version`` is None when the DSL is absent (or its metadata unreadable)."""

    version: str | None
    importable: bool

    @property
    def installed(self) -> bool:
        return self.version is not None or self.importable


@functools.lru_cache(maxsize=1)
def cutedsl_state() -> CuteDslState:
    """Installed DSL version from metadata, without importing ``cutlass``."""
    try:
        version = importlib.metadata.version(DSL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = None
    importable = importlib.util.find_spec("cutlass") is not None
    return CuteDslState(version=version, importable=importable)


def _parse(v: str) -> Version | None:
    try:
        return Version(v)
    except InvalidVersion:
        return None


def cutedsl_too_old(floor: str) -> bool:
    """True when the DSL is absent or its version is below ``floor``."""
    state = cutedsl_state()
    if state.version is None:
        return True
    installed = _parse(state.version)
    return installed is None or installed < Version(floor)


def cutedsl_requirement_error(what: str, floor: str) -> CuteDslVersionError:
    """The error to raise (or decline with) when ``what`` needs DSL ``floor`` and the installed one is older."""
    state = cutedsl_state()
    if state.version is None:
        found = "no nvidia-cutlass-dsl installed" if not state.importable else "a cutlass package without nvidia-cutlass-dsl metadata"
        return CuteDslVersionError(f"{what} needs nvidia-cutlass-dsl>={floor}, but found {found}; install nvidia-cutlass-dsl>={floor}.")
    return CuteDslVersionError(
        f"{what} needs nvidia-cutlass-dsl>={floor}, but {state.version} is installed; "
        f"upgrade with pip install 'nvidia-cutlass-dsl>={floor}' (installing this wheel again changes nothing)."
    )


def require_cutedsl(what: str, floor: str) -> None:
    """Raise :class:`CuteDslVersionError` unless the installed DSL satisfies ``floor``."""
    if cutedsl_too_old(floor):
        raise cutedsl_requirement_error(what, floor)
