"""Recipe R2: workspace carving validates and never allocates; the seed's error when none is given."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudnn.workspace import WORKSPACE_ALIGNMENT, Workspace, ws_align  # noqa: E402


def test_ws_align():
    assert ws_align(0) == 0 and ws_align(1) == 128 and ws_align(128) == 128 and ws_align(129) == 256


def test_missing_workspace_raises_seed_error():
    with pytest.raises(ValueError, match=r"Owner requires a 256-byte workspace but execute\(\) received none; allocate graph.get_workspace_size\(\) bytes"):
        Workspace.over(None, 256, "Owner")
    assert Workspace.over(None, 0, "Owner").data_ptr == 0


def test_too_small_wrong_dtype_wrong_device():
    buf = torch.empty(1024, dtype=torch.uint8)
    with pytest.raises(ValueError, match="holds 1024 bytes but 4096 are required"):
        Workspace.over(buf, 4096, "Owner", device="cpu")
    with pytest.raises(ValueError, match="contiguous 1-D torch.uint8"):
        Workspace.over(torch.empty(256, dtype=torch.float32), 128, "Owner", device="cpu")
    with pytest.raises(ValueError, match="workspace is on cpu but the operands are on cuda:0"):
        Workspace.over(buf, 512, "Owner", device="cuda:0")
    with pytest.raises(TypeError):
        Workspace.over(bytearray(10), 5, "Owner")


def test_misaligned_workspace_rejected():
    base = torch.empty(4096, dtype=torch.uint8)
    off = (WORKSPACE_ALIGNMENT - base.data_ptr() % WORKSPACE_ALIGNMENT) % WORKSPACE_ALIGNMENT + 1
    with pytest.raises(ValueError, match="not 128-byte aligned"):
        Workspace.over(base[off:], 256, "Owner", device="cpu")


def test_take_and_view_are_aligned_views_without_allocation():
    base = torch.empty(8192, dtype=torch.uint8)
    off = (WORKSPACE_ALIGNMENT - base.data_ptr() % WORKSPACE_ALIGNMENT) % WORKSPACE_ALIGNMENT
    buf = base[off : off + 4096]
    ws = Workspace.over(buf, 1024, "Owner", device="cpu")
    a = ws.take(3, "int32")
    b = ws.take(10, torch.float32, shape=(2, 5))
    assert a.shape == (3,) and b.shape == (2, 5)
    assert a.data_ptr() == buf.data_ptr() and b.data_ptr() == buf.data_ptr() + 128
    assert a.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    v = ws.view(256, "float32", (4,))
    assert v.data_ptr() == buf.data_ptr() + 256
    with pytest.raises(ValueError, match="overruns the declared 1024-byte workspace"):
        ws.take(1024, "uint8")
    with pytest.raises(ValueError, match="misaligned or outside"):
        ws.view(100, "float32", (4,))
