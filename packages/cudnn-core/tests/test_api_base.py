"""APIBase, TensorDesc and TupleDict contracts (metadata only: no torch needed except where marked)."""

from __future__ import annotations

import pytest

from cudnn.api_base import APIBase, TensorDesc, TupleDict
from cudnn.datatypes import data_type, to_data_type


def test_tensordesc_contiguous_and_describe():
    d = TensorDesc.contiguous((2, 3, 4), "bfloat16", "q")
    assert d.stride == (12, 4, 1) and d.dtype is data_type.BFLOAT16 and d.numel() == 24 and d.span_elements() == 24
    assert d.describe() == "q (shape=(2, 3, 4), stride=(12, 4, 1), dtype=bf16)"
    with pytest.raises(ValueError, match="differ in rank"):
        TensorDesc((2, 3), (1,), "float16", "bad")


def test_data_type_parsing():
    assert to_data_type("torch.float16") is data_type.HALF
    assert to_data_type("bf16") is data_type.BFLOAT16
    assert to_data_type(data_type.FLOAT) is data_type.FLOAT
    with pytest.raises(ValueError, match="unknown data type"):
        to_data_type("complex32")


def test_tupledict_unpacks_in_documented_order():
    r = TupleDict(o=1, lse=2)
    o, lse = r
    assert (o, lse) == (1, 2) and r["lse"] == 2 and r[0] == 1 and r.keys_in_order() == ("o", "lse")


class _Adapter(APIBase):
    def __init__(self, x: TensorDesc):
        super().__init__()
        self.x = x
        self.compiles = 0

    def check_support(self):
        self._check_dtype(self.x, (data_type.HALF, data_type.BFLOAT16), "Adapter")
        self._check_unit_stride(self.x, -1, "Adapter")
        return True

    def compile(self):
        self._ensure_support_checked()
        self.compiles += 1
        self._compiled_kernel = object()

    def execute(self, value, current_stream=None):
        return value + 1


def test_call_compiles_once_then_executes():
    a = _Adapter(TensorDesc.contiguous((4, 8), "float16", "x"))
    assert a(1) == 2 and a(2) == 3 and a.compiles == 1


def test_decline_names_tensor_and_accepted_dtypes():
    a = _Adapter(TensorDesc.contiguous((4, 8), "float32", "x"))
    with pytest.raises(NotImplementedError, match=r"x \(shape=\(4, 8\), stride=\(8, 1\), dtype=fp32\) has unsupported dtype fp32; accepted: fp16, bf16"):
        a.compile()
    with pytest.raises(NotImplementedError):  # the decline is remembered
        a.compile()
    b = _Adapter(TensorDesc((4, 8), (1, 4), "float16", "x"))
    with pytest.raises(NotImplementedError, match="needs unit stride in dim -1"):
        b.check_support()


def test_execute_time_tensor_must_match_plan():
    torch = pytest.importorskip("torch")
    desc = TensorDesc.contiguous((4, 8), "float16", "x", device="cpu")
    APIBase._check_tensor_matches(torch.empty(4, 8, dtype=torch.float16), desc)
    with pytest.raises(ValueError, match=r"got x \(shape=\(8, 4\)"):
        APIBase._check_tensor_matches(torch.empty(8, 4, dtype=torch.float16), desc)
    with pytest.raises(ValueError, match="declared at plan time but execute\\(\\) received None"):
        APIBase._check_tensor_matches(None, desc)
