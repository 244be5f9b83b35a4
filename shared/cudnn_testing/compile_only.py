"""Compile-only helpers: build kernels for sm_90a from fake tensors on a machine with no GPU.

Set ``CUTE_DSL_ARCH=sm_90a`` (the root conftest does) and use ``cute.runtime.make_fake_compact_tensor``
with ``cute.sym_int()`` extents. ``keep_artifacts`` writes PTX/cubin so tests can read symbol names
(Rule 6) and check that WGMMA and TMA instructions are really emitted::

    def test_my_kernel_symbols(tmp_path):
        ptx = compile_ptx(lambda: my_kernel_module.compile_kernel(cfg), tmp_path)
        assert_cudnn_symbols(ptx)
        assert "wgmma.mma_async" in ptx

Two DSL facts these helpers absorb (every lane, 4.6.2 to 4.8.1): ``CUTE_DSL_KEEP`` / ``CUTE_DSL_DUMP_DIR``
are read once, when ``cutlass`` is imported, so setting them later changes nothing by itself; and the
dump directory must exist or nothing is written. ``keep_artifacts`` sets the variables and also the
live DSL settings, and creates the directory. Keeping artifacts turns the DSL's own JIT cache off, but
not ``cudnn.kernel_cache``: build the kernel directly (``compile_ptx(build)``), not through the cache,
or nothing is compiled and there is no PTX to read.
"""

# No ``from __future__ import annotations``: the DSL reads the kernel annotations below as objects.
import contextlib
import glob
import os
import re
import struct

#: The Rule 6 prefix every kernel symbol starts with.
PREFIX = "cudnn"


def _live_env_manager():
    try:
        from cudnn._compat import dsl_env_manager
    except ImportError:
        return None
    return dsl_env_manager()


def _sticky_keep_options() -> list:
    """(option, attributes) of the KeepPTX / KeepCUBIN / KeepSASS options of ``cute.compile``'s long-lived
    CompileOptions, before a dump.

    ``cute.compile`` hands the same CompileOptions object to every compile and the DSL turns its ``keep_*``
    options on from the environment settings but never off, so without this every later compile of the process
    would keep dumping (into the working directory)."""
    try:
        import cutlass.cute as cute
        from cutlass.base_dsl import compiler

        options = cute.compile._compile_options.options
    except Exception:  # another DSL layout: nothing to restore
        return []
    kinds = [getattr(compiler, n) for n in ("KeepPTX", "KeepCUBIN", "KeepSASS") if hasattr(compiler, n)]
    return [(options[k], dict(vars(options[k]))) for k in kinds if k in options]


@contextlib.contextmanager
def keep_artifacts(tmp_path, what: str = "ptx,cubin"):
    """Within: the DSL dumps ``what`` under ``tmp_path``. Yields a function returning the PTX text."""
    tmp_path = str(tmp_path)
    os.makedirs(tmp_path, exist_ok=True)
    tokens = {t.strip() for t in what.split(",") if t.strip()}
    old_env = {k: os.environ.get(k) for k in ("CUTE_DSL_KEEP", "CUTE_DSL_DUMP_DIR")}
    os.environ["CUTE_DSL_KEEP"] = ",".join(sorted(tokens))
    os.environ["CUTE_DSL_DUMP_DIR"] = tmp_path

    envar = _live_env_manager()
    live = {"keep_ptx": "ptx" in tokens, "keep_cubin": "cubin" in tokens, "dump_dir": tmp_path}
    old_live = {}
    if envar is not None:
        if hasattr(envar, "keep_tokens"):
            live["keep_tokens"] = frozenset(tokens)
        for name, value in live.items():
            if hasattr(envar, name):
                old_live[name] = getattr(envar, name)
                setattr(envar, name, value)

    def ptx_text() -> str:
        files = sorted(glob.glob(os.path.join(tmp_path, "**", "*.ptx"), recursive=True))
        parts = []
        for f in files:
            with open(f) as fh:
                parts.append(fh.read())
        return "\n".join(parts)

    sticky = _sticky_keep_options()
    try:
        yield ptx_text
    finally:
        for name, value in old_live.items():
            setattr(envar, name, value)
        for option, state in sticky:  # the DSL's persistent compile options only ever turn "keep" on (and keep their
            vars(option).clear()  # dump paths, which the backend writes to): put them back as they were
            vars(option).update(state)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def compile_ptx(build, tmp_path) -> str:
    """Run ``build()`` (a ``cute.compile`` call, not a cache lookup) keeping PTX under ``tmp_path``; return the PTX."""
    with keep_artifacts(tmp_path, "ptx") as ptx_text:
        build()
        text = ptx_text()
    if not text:
        raise AssertionError(f"no PTX was written under {tmp_path}: was the kernel really compiled (a cudnn.kernel_cache hit compiles nothing)?")
    return text


def kernel_symbols(ptx: str) -> list[str]:
    """Names of ``.entry`` kernels in PTX text."""
    return re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx)


def symbol_violations(symbols, prefix: str = PREFIX) -> list[str]:
    """The symbols that break Rule 6: not starting with ``<prefix>_``, or carrying a ``cutlass`` component."""
    return [s for s in symbols if not s.startswith(prefix + "_") or "cutlass" in s.lower()]


def assert_cudnn_symbols(ptx: str, prefix: str = PREFIX) -> list[str]:
    """Rule 6 detector: every kernel in ``ptx`` is named ``<prefix>_...`` with no ``cutlass`` component
    (``kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)`` or ``cudnn._compat.name_kernel``).
    Returns the symbols; raises AssertionError naming the offenders, or when the PTX has no kernel."""
    symbols = kernel_symbols(ptx)
    if not symbols:
        raise AssertionError("no .entry kernel in the PTX: nothing to check (was PTX kept?)")
    bad = symbol_violations(symbols, prefix)
    if bad:
        raise AssertionError(
            f"{len(bad)} kernel symbol(s) break Rule 6 (must start with '{prefix}_' and carry no 'cutlass'; call "
            f'<kernel>.set_name_prefix("{prefix}", remove_cutlass_symbol=True) right after the @cute.kernel): ' + ", ".join(b[:120] for b in bad)
        )
    return symbols


def tiny_kernel(named: bool = True, name_with=None):
    """A real, tiny CuTe DSL kernel (``b[i] = 2 * a[i]`` over a ``cute.sym_int`` extent) for tests of the
    core machinery (kernel cache, Rule 6 naming, tvm-ffi export). Returns ``compile(options=None)`` that
    ``cute.compile``s it from fake tensors (``CUTE_DSL_ARCH`` picks the target) and returns the artifact.

    ``named=False`` leaves out the Rule 6 naming call (the planted violation of the symbol detector);
    ``name_with(kernel)`` replaces the direct ``set_name_prefix`` call (e.g. ``cudnn._compat.name_kernel``).
    Each call defines a fresh kernel function, so nothing is shared through the DSL's own caches."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute

    @cute.kernel
    def cudnn_tiny_scale_kernel(gA: cute.Tensor, gB: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * 128 + tidx
        if i < cute.size(gA):
            gB[i] = gA[i] * 2.0

    if named:
        if name_with is not None:
            name_with(cudnn_tiny_scale_kernel)
        else:
            cudnn_tiny_scale_kernel.set_name_prefix(PREFIX, remove_cutlass_symbol=True)

    @cute.jit
    def tiny_scale(mA: cute.Tensor, mB: cute.Tensor, stream: cuda.CUstream):
        n = cute.size(mA)
        cudnn_tiny_scale_kernel(mA, mB).launch(grid=((n + 127) // 128, 1, 1), block=(128, 1, 1), stream=stream)

    def compile(options=None):
        n = cute.sym_int()
        a = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (n,))
        b = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (n,))
        stream = cute.runtime.make_fake_stream()
        if options:
            return cute.compile(tiny_scale, a, b, stream, options=options)
        return cute.compile(tiny_scale, a, b, stream)

    return compile


def _cubin_sections(tmp_path):
    """(cubin bytes, section name, file offset, size) of every ELF section of the dumped cubins."""
    for path in glob.glob(str(tmp_path / "**" / "*.cubin"), recursive=True):
        data = open(path, "rb").read()
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names = secs[shstrndx][4]
        for sec in secs:
            yield data, data[names + sec[0] : data.index(b"\0", names + sec[0])], sec[4], sec[5]


def sass_instructions(tmp_path) -> dict[str, int]:
    """SASS instruction count of every kernel in the dumped cubins (its ``.text.<symbol>`` section over the 16 bytes of
    one sm_90 instruction), by symbol: the static code size, with no disassembler needed."""
    return {name[len(b".text.") :].decode(): size // 16 for _, name, _, size in _cubin_sections(tmp_path) if name.startswith(b".text.")}


def frame_sizes(tmp_path) -> list[int]:
    """EIATTR_FRAME_SIZE (0x11) of every kernel in the dumped cubins: 0 means ptxas spilled nothing to local memory."""
    sizes = []
    for data, name, off, length in _cubin_sections(tmp_path):
        if name != b".nv.info":
            continue
        end = off + length
        while off < end:
            fmt, attr = data[off], data[off + 1]
            if fmt == 4:  # EIFMT_SVAL: u16 size, then (function index u32, value u32) for these attributes
                size = struct.unpack_from("<H", data, off + 2)[0]
                if attr == 0x11:
                    sizes.append(struct.unpack_from("<I", data, off + 8)[0])
                off += 4 + size
            else:
                off += 4
    return sizes
