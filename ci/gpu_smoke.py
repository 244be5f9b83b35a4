"""GPU host smoke test: the offline DSL bundle imports, compiles and runs a `cudnn`-named kernel."""

from __future__ import annotations

import time

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def cudnn_smoke_add_one(gA: cute.Tensor, gB: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 128 + tidx
    if i < gA.shape[0]:
        gB[i] = gA[i] + cutlass.Float32(1.0)


cudnn_smoke_add_one.set_name_prefix("cudnn", remove_cutlass_symbol=True)


@cute.jit
def launch(a: cute.Tensor, b: cute.Tensor):
    cudnn_smoke_add_one(a, b).launch(grid=((a.shape[0] + 127) // 128, 1, 1), block=(128, 1, 1))


def main():
    a = torch.randn(1000, device="cuda")
    b = torch.full_like(a, float("nan"))
    t = time.perf_counter()
    f = cute.compile(launch, from_dlpack(a), from_dlpack(b))
    print(f"compile {time.perf_counter() - t:.2f}s")
    f(from_dlpack(a), from_dlpack(b))
    torch.cuda.synchronize()
    assert torch.equal(b, a + 1), "smoke kernel wrong"
    print("smoke kernel OK on", torch.cuda.get_device_name(), "cutlass", cutlass.__version__ if hasattr(cutlass, "__version__") else "?")


if __name__ == "__main__":
    main()
