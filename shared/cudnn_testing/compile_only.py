"""Compile-only helpers: build kernels for sm_90a from fake tensors on a machine with no GPU.

Set ``CUTE_DSL_ARCH=sm_90a`` (the root conftest does) and use ``cute.runtime.make_fake_compact_tensor``
with ``cute.sym_int()`` extents. ``keep_artifacts`` writes PTX/cubin so tests can read symbol names
(Rule 6) and check that WGMMA and TMA instructions are really emitted.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re


@contextlib.contextmanager
def keep_artifacts(tmp_path):
    """Within: the DSL dumps ptx and cubin under ``tmp_path``. Yields a function returning the PTX text."""
    old = {k: os.environ.get(k) for k in ("CUTE_DSL_KEEP", "CUTE_DSL_DUMP_DIR")}
    os.environ["CUTE_DSL_KEEP"] = "ptx,cubin"
    os.environ["CUTE_DSL_DUMP_DIR"] = str(tmp_path)

    def ptx_text() -> str:
        files = glob.glob(os.path.join(str(tmp_path), "**", "*.ptx"), recursive=True)
        return "\n".join(open(f).read() for f in files)

    try:
        yield ptx_text
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def kernel_symbols(ptx: str) -> list[str]:
    """Names of ``.entry`` kernels in PTX text."""
    return re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx)
