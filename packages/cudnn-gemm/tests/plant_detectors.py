"""Plant one violation per detector in a scratch copy of cudnn.gemm and check that its detector goes red
(a detector is trusted only once seen failing). Not collected by pytest; run on the GPU host:

    source ci/gpu_env.sh; python3 packages/cudnn-gemm/tests/plant_detectors.py [substring of the test ids to plant]

Each plant edits a copy of ``src/cudnn/gemm/dense/api.py`` (or the kernel file) under a temp dir that is put first on
PYTHONPATH, runs the matching test of test_gemm_detectors.py, and reports RED (caught) or GREEN (missed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
ANCHOR = "        handle = launch_stream_handle(current_stream, a.device)\n"
SPLIT_ANCHOR = '        """The two launches a split-K plan promises: the GEMM into the fp32 partials, then the reduction."""\n'
PLANTS = {
    # detector test id -> (anchor, replacement)
    "test_execute_no_sync_no_alloc and False": (ANCHOR, ANCHOR + "        float(d.flatten()[0])  # PLANT: device-to-host read\n"),
    "test_execute_no_sync_no_alloc and True": (ANCHOR, ANCHOR + "        __import__('torch').empty(16, device=a.device)  # PLANT: allocation\n"),
    "test_default_stream_handle_never_reaches_external_stream": (
        ANCHOR,
        ANCHOR + "        __import__('torch').cuda.ExternalStream(handle)  # PLANT: raw handle into ExternalStream\n",
    ),
    "test_compile_cache_hit_when_m_changes": (
        '        key = (self.config, "tvm-ffi" if self._tvm_ffi else "dsl")\n',
        '        key = (self.config, "tvm-ffi" if self._tvm_ffi else "dsl", self._m)  # PLANT: M in the compile key\n',
    ),
    "test_first_execute_under_capture_then_replay_matches_eager": (
        "        self._precompute_scalars()\n",
        "        self._precompute_scalars()\n        __import__('torch').cuda.synchronize()  # PLANT: sync at build\n",
    ),
    # the same detectors applied to the fp8 and split-K paths (test file given explicitly)
    "test_fp8_execute_no_sync_no_alloc": (
        ANCHOR,
        ANCHOR + "        _ = None if scale_a is None else float(scale_a[0])  # PLANT: host read of a device scale\n",
        "test_gemm_fp8_gpu.py",
    ),
    "test_split_k_workspace_contract": (
        SPLIT_ANCHOR,
        SPLIT_ANCHOR + "        __import__('torch').empty(16, device=a.device)  # PLANT: allocation on the split-K path\n",
        "test_gemm_options_gpu.py",
    ),
    "test_split_k_is_deterministic": (
        SPLIT_ANCHOR,
        SPLIT_ANCHOR + "        alpha = alpha * (1.0 + 1e-3 * __import__('random').random())  # PLANT: run-to-run variation\n",
        "test_gemm_options_gpu.py",
    ),
    # epilogue round 2 (test_gemm_epi2_gpu.py): amax_fast without the staged bias's other-mode predicate; "auto2" without
    # compiling the plan's second tile (a new M that picks it then compiles)
    "test_epi2_amax_fast_ignores_outside_outputs": (
        "                                    if gm >= m:\n",
        "                                    if gm >= m + (1 << 30):  # PLANT: outside rows counted\n",
        "test_gemm_epi2_gpu.py",
        "dense/kernel_sm90.py",
    ),
    "test_epi2_auto2_compile_cache_hit_when_m_changes": (
        "        for tile, swizzle in self._tile_set:\n",
        "        for tile, swizzle in ():  # PLANT: the second tile is not compiled with the plan\n",
        "test_gemm_epi2_gpu.py",
    ),
}


def _run_plant(test_id: str, anchor: str, repl: str, test_file: str = "test_gemm_detectors.py", src_file: str = "dense/api.py") -> tuple[str, str]:
    tmp = tempfile.mkdtemp(prefix="plant_")
    try:
        shutil.copytree(os.path.join(SRC, "cudnn", "gemm"), os.path.join(tmp, "cudnn", "gemm"))
        api = os.path.join(tmp, "cudnn", "gemm", *src_file.split("/"))
        text = open(api).read()
        assert anchor in text, f"plant anchor missing for {test_id}"
        open(api, "w").write(text.replace(anchor, repl, 1))
        env = dict(os.environ)
        # the planted copy of cudnn.gemm wins over the real one; cudnn (core) stays a namespace across both
        env["PYTHONPATH"] = tmp + os.pathsep + env.get("PYTHONPATH", "")
        env["CUDNN_KERNEL_CACHE"] = "0"  # a kernel plant must compile, never load the unplanted kernel from disk
        code = (
            "import sys, cudnn.gemm as g; assert 'plant_' in g.__file__, g.__file__; import pytest;"
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {os.path.join(HERE, test_file)!r}, '-k', {test_id!r}]))"
        )
        rc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        tail = (rc.stdout + rc.stderr).strip().splitlines()[-1:] or [""]
        verdict = "RED (caught)" if rc.returncode not in (0, 5) else ("NO TEST RAN" if rc.returncode == 5 else "GREEN (missed)")
        return verdict, tail[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    from concurrent.futures import ThreadPoolExecutor

    # optional argument: run only the plants whose test id contains it (e.g. "epi2")
    chosen = {tid: p for tid, p in PLANTS.items() if len(sys.argv) < 2 or sys.argv[1] in tid}
    with ThreadPoolExecutor(max(1, len(chosen))) as pool:
        futures = {tid: pool.submit(_run_plant, tid, *plant) for tid, plant in chosen.items()}
    missed = 0
    for tid, fut in futures.items():
        verdict, tail = fut.result()
        missed += verdict != "RED (caught)"
        print(f"PLANT {tid}: {verdict} | {tail}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
