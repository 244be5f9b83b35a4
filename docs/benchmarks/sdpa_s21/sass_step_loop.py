"""Session-21 diagnostic, compile-only (no GPU): the SASS length of the forward's key-block step loop for plan
options, from the cubin the DSL keeps (``CUTE_DSL_KEEP``) disassembled with nvdisasm. The step loop is the backward
branch whose body holds 16 HGMMAs (8 for S = QK^T, 8 for O += PV at d = 128). From the repository root, with the
package sources on PYTHONPATH and CUTE_DSL_ARCH=sm_90a: ``python3 sass_step_loop.py NVDISASM "persistent=False,
tile_n=128" "q_stages=1, wg_epilogue=False" ...`` (each argument: SdpaFwdSm90 plan options of a d128 non-causal plan;
an empty string is the defaults)."""

import collections
import pathlib
import re
import subprocess
import sys
import tempfile


def step_loop(sass: str, hgmma: int = 16):
    label_at, ins = {}, []
    for line in sass.splitlines():
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            label_at[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*)", line)
        if m:
            ins.append(m.group(1))
    for i, s in enumerate(ins):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", s)
        if m and label_at.get(m.group(1), 1 << 30) < i:
            body = ins[label_at[m.group(1)] : i + 1]
            if sum("HGMMA" in b for b in body) == hgmma:
                return body
    return None


def main():
    from cudnn.api_base import TensorDesc
    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import keep_artifacts

    nvdisasm = sys.argv[1]
    q = TensorDesc.contiguous((2, 8, 4096, 128), "bfloat16", "q")
    for spec in sys.argv[2:]:
        plan = SdpaFwdSm90(q, q, q, None, None, **eval(f"dict({spec})"))
        assert plan.check_support()
        with tempfile.TemporaryDirectory() as d:
            with keep_artifacts(pathlib.Path(d)):
                compile_sdpa_fwd(plan.key)
            cubin = next(pathlib.Path(d).rglob("*.cubin"))
            sass = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
        body = step_loop(sass)
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", b).split()[0].split(".")[0] for b in body)
        uniform = sum(n for op, n in ops.items() if op.startswith("U"))
        print(
            f"{spec or 'defaults'}: step loop {len(body)} SASS instructions, {uniform} on the uniform datapath "
            f"(UIADD3 {ops['UIADD3']}, UMOV {ops['UMOV']}, ULOP3 {ops['ULOP3']}, ULEA {ops['ULEA']})"
        )


if __name__ == "__main__":
    main()
