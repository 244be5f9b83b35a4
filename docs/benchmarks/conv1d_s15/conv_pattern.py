"""DRAM access-pattern probe for the conv1d forward: pure copies of x [T, D] bf16 with the run grid's pattern
(each program one contiguous token run of a 1024-channel block) vs interleaved rows / chunks, vs torch copy."""
import torch, triton, triton.language as tl

@triton.jit
def run_copy(x, y, T, D: tl.constexpr, NR, U: tl.constexpr, BD: tl.constexpr, MODE: tl.constexpr, C: tl.constexpr):
    cb = tl.program_id(0)
    j = tl.program_id(1)
    cols = cb * BD + tl.arange(0, BD)
    base = T // NR
    rem = T - base * NR
    if MODE == 0:  # contiguous run
        t0 = j * base + tl.minimum(j, rem)
        run = base + (j < rem).to(tl.int32)
        for k in range(0, run, U):
            rows = t0 + k + tl.arange(0, U)
            m = (k + tl.arange(0, U)) < run
            v = tl.load(x + rows[:, None] * D + cols[None, :], mask=m[:, None])
            tl.store(y + rows[:, None] * D + cols[None, :], v, mask=m[:, None])
    elif MODE == 1:  # chunks of C tokens, chunk index j + k * NR
        nch = (T + C - 1) // C
        for c in range(j, nch, NR):
            for k in range(0, C, U):
                rows = c * C + k + tl.arange(0, U)
                m = rows < T
                v = tl.load(x + rows[:, None] * D + cols[None, :], mask=m[:, None])
                tl.store(y + rows[:, None] * D + cols[None, :], v, mask=m[:, None])

def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200)

for T, D in [(16384, 4096), (32768, 4096)]:
    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    nbytes = 2 * T * D * 2
    res = {"torch-copy": bench(lambda: y.copy_(x))}
    for BD, nw in ((1024, 4), (4096, 16), (2048, 8)):
        for ctas_per_sm in (4,) if BD == 1024 else (1, 2):
            NR = ctas_per_sm * 132 // (D // BD)
            U = 4
            for mode, C in ((0, 0), (1, 4), (1, 8), (1, 16)):
                name = f"{'run' if mode == 0 else f'chunk{C}'} BD{BD} {ctas_per_sm}/SM"
                f = lambda: run_copy[(D // BD, NR)](x, y, T, D, NR, U, BD, mode, max(C, 1), num_warps=nw)
                f(); torch.cuda.synchronize()
                assert torch.equal(x, y), name
                y.zero_()
                res[name] = bench(f)
    for k, ms in res.items():
        print(f"T{T // 1024}k D{D} {k:24s} {ms * 1e3:8.1f} us {nbytes / ms / 1e9:8.1f} TB/s", flush=True)
