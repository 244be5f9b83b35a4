"""Session-15 DRAM access-pattern probe for the conv1d forward (a diagnostic, not a benchmark table): pure copies of
x [T, D] bf16 with the run grid's pattern (each program one contiguous token run of a BD-channel block) against
chunk-interleaved runs (row j copies the C-token chunks j, j + n_runs, ...) and torch's copy. Prints us and TB/s."""

import torch
import triton
import triton.language as tl


@triton.jit
def run_copy(x, y, T, D: tl.constexpr, NR, U: tl.constexpr, BD: tl.constexpr, MODE: tl.constexpr, C: tl.constexpr):
    cb = tl.program_id(0)
    j = tl.program_id(1)
    cols = cb * BD + tl.arange(0, BD)
    base = T // NR
    rem = T - base * NR
    if MODE == 0:  # one contiguous run
        t0 = j * base + tl.minimum(j, rem)
        run = base + (j < rem).to(tl.int32)
        for k in range(0, run, U):
            rows = t0 + k + tl.arange(0, U)
            m = (k + tl.arange(0, U)) < run
            v = tl.load(x + rows[:, None] * D + cols[None, :], mask=m[:, None])
            tl.store(y + rows[:, None] * D + cols[None, :], v, mask=m[:, None])
    else:  # chunks of C tokens, chunk index j + k * NR
        nch = (T + C - 1) // C
        for c in range(j, nch, NR):
            for k in range(0, C, U):
                rows = c * C + k + tl.arange(0, U)
                m = rows < T
                v = tl.load(x + rows[:, None] * D + cols[None, :], mask=m[:, None])
                tl.store(y + rows[:, None] * D + cols[None, :], v, mask=m[:, None])


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200)


def main():
    for T, D in ((16384, 4096), (32768, 4096)):
        x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        nbytes = 2 * T * D * 2
        res = {"torch-copy": bench(lambda x=x, y=y: y.copy_(x))}
        for bd, nw in ((1024, 4), (4096, 16), (2048, 8)):
            for ctas_per_sm in (4,) if bd == 1024 else (1, 2):
                nr = ctas_per_sm * 132 // (D // bd)
                for mode, c in ((0, 0), (1, 4), (1, 8), (1, 16)):
                    name = f"{'run' if mode == 0 else f'chunk{c}'} BD{bd} {ctas_per_sm}/SM"

                    def f(x=x, y=y, T=T, D=D, nr=nr, bd=bd, mode=mode, c=c, nw=nw):
                        run_copy[(D // bd, nr)](x, y, T, D, nr, 4, bd, mode, max(c, 1), num_warps=nw)

                    f()
                    torch.cuda.synchronize()
                    assert torch.equal(x, y), name
                    y.zero_()
                    res[name] = bench(f)
        for k, ms in res.items():
            print(f"T{T // 1024}k D{D} {k:24s} {ms * 1e3:8.1f} us {nbytes / ms / 1e9:8.1f} TB/s", flush=True)


if __name__ == "__main__":
    main()
