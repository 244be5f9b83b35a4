"""The main job: every family's benchmark, our kernels against the peers, a table each.

    python benchmarks/run_all.py [gemm sdpa_fwd linear_attention ...]

With a Hopper GPU each family script's ``main()`` runs and writes docs/benchmarks/<name>.{md,csv,png}.
Without one, each script's ``compile_check()`` compiles its kernels for sm_90a (CUTE_DSL_ARCH) to show
the build works, and this says that running them needs a GPU.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback

FAMILIES = ["gemm", "sdpa_fwd", "sdpa_bwd", "linear_attention"]


def _has_hopper() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def main(argv: list[str]) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    names = argv or FAMILIES
    gpu = _has_hopper()
    failures = 0
    if not gpu:
        os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
        print("No Hopper GPU here: compiling every kernel for sm_90a instead. Running them (and the peers) needs an H100/H200.\n")
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            print(f"[{name}] cannot import benchmarks/{name}.py: {type(exc).__name__}: {exc}")
            failures += 1
            continue
        try:
            if gpu:
                sys.argv = [module.__file__]
                module.main()
            else:
                check = getattr(module, "compile_check", None)
                if check is None:
                    print(f"[{name}] no compile_check(): nothing to compile without a GPU")
                    continue
                start = time.perf_counter()
                compiled = check()
                print(f"[{name}] compiled for sm_90a in {time.perf_counter() - start:.1f} s: {', '.join(compiled) if compiled else 'nothing'}")
        except Exception:
            traceback.print_exc()
            failures += 1
    if not gpu:
        print("\nKernels compiled; run this on a Hopper GPU to get the tables (ci/gpu_env.sh sets up the GPU host).")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
