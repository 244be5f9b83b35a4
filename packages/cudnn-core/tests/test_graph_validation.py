"""Every validation error of the graph API, with its message: build-time (validate) and execute-time
(variant pack, workspace, overrides, handle, invalidation). Each names the node and/or tensor.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import cudnn  # noqa: E402
from cudnn.graph import GraphValidationError  # noqa: E402
from cudnn.graph.engine import Engine, EngineRegistry, Plan  # noqa: E402

FP32, BF16 = cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16
CPU = cudnn.create_handle(device="cpu")


def _mm_graph(**kw):
    g = cudnn.pygraph(io_data_type=FP32, handle=CPU, **kw)
    a = g.tensor(name="a", dim=[1, 8, 16], stride=[128, 16, 1])
    b = g.tensor(name="b", dim=[1, 16, 4], stride=[64, 4, 1])
    c = g.matmul(name="mm", A=a, B=b)
    c.set_output(True)
    return g, a, b, c


def _built(**kw):
    g, a, b, c = _mm_graph(**kw)
    g.build()
    return g, a, b, c, {a: torch.randn(1, 8, 16), b: torch.randn(1, 16, 4), c: torch.empty(1, 8, 4)}


# -- validate ---------------------------------------------------------------------------------------
def test_shape_mismatch_names_node_and_tensors():
    g = cudnn.pygraph(io_data_type=FP32, handle=CPU)
    a = g.tensor(name="a", dim=[1, 8, 16])
    b = g.tensor(name="b", dim=[1, 12, 4])
    g.matmul(name="mm", A=a, B=b).set_output(True)
    with pytest.raises(GraphValidationError, match=r"matmul node 'mm': A 'a' .* has K=16 but B 'b' .* has K=12"):
        g.validate()


def test_pointwise_broadcast_mismatch():
    g = cudnn.pygraph(io_data_type=FP32, handle=CPU)
    x, y = g.tensor(name="x", dim=[2, 3, 4]), g.tensor(name="y", dim=[2, 5, 4])
    g.add(name="sum", a=x, b=y).set_output(True)
    with pytest.raises(GraphValidationError, match=r"pointwise node 'sum': dim 1 does not broadcast"):
        g.validate()


def test_missing_dtype_and_missing_dim():
    g = cudnn.pygraph(handle=CPU)  # no io_data_type
    x = g.tensor(name="x", dim=[2, 3])
    g.relu(input=x).set_output(True)
    with pytest.raises(GraphValidationError, match=r"input tensor 'x' .* has no data type"):
        g.validate()
    g = cudnn.pygraph(io_data_type=FP32, handle=CPU)
    x = g.tensor(name="x")
    g.relu(input=x).set_output(True)
    with pytest.raises(GraphValidationError, match=r"input tensor 'x' .* has no dim"):
        g.validate()


def test_matmul_dtype_mismatch():
    g = cudnn.pygraph(handle=CPU)
    a = g.tensor(name="a", dim=[1, 4, 4], data_type=BF16)
    b = g.tensor(name="b", dim=[1, 4, 4], data_type=FP32)
    g.matmul(name="mm", A=a, B=b).set_output(True)
    with pytest.raises(GraphValidationError, match="different dtypes"):
        g.validate()


def test_reduction_needs_output_dims():
    g = cudnn.pygraph(io_data_type=FP32, handle=CPU)
    x = g.tensor(name="x", dim=[2, 3])
    g.reduction(name="r", input=x, mode=cudnn.reduction_mode.ADD).set_output(True)
    with pytest.raises(GraphValidationError, match=r"reduction node 'r': set the output's dim"):
        g.validate()


def test_duplicate_uid_and_duplicate_node_name():
    g = cudnn.pygraph(io_data_type=FP32, handle=CPU)
    x = g.tensor(name="x", dim=[2], uid=7)
    y = g.tensor(name="y", dim=[2], uid=7)
    g.add(name="n", a=x, b=y).set_output(True)
    with pytest.raises(GraphValidationError, match="uid 7 is used by both"):
        g.validate()
    with pytest.raises(GraphValidationError, match="node name 'n' is already used"):
        g.add(name="n", a=x, b=y)


def test_tensor_of_another_graph():
    g1, g2 = cudnn.pygraph(io_data_type=FP32), cudnn.pygraph(io_data_type=FP32)
    x = g1.tensor(name="x", dim=[2])
    with pytest.raises(GraphValidationError, match="belongs to another graph"):
        g2.relu(input=x)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "exactly one of generate_stats / is_inference"),
        ({"is_inference": True, "use_causal_mask": True, "use_causal_mask_bottom_right": True}, "cannot both be true"),
        ({"is_inference": True, "sliding_window_length": 4, "diagonal_band_left_bound": 4}, "cannot be set at the same time"),
        ({"is_inference": True, "use_causal_mask": True, "diagonal_band_right_bound": 2}, "cannot be set at the same time"),
        ({"is_inference": True, "use_padding_mask": True}, "use_padding_mask=True needs both seq_len_q and seq_len_kv"),
        ({"is_inference": True, "sliding_window_length": 0}, "must be >= 1"),
    ],
)
def test_sdpa_argument_errors(kwargs, message):
    g = cudnn.pygraph(io_data_type=BF16, handle=CPU)
    q = g.tensor(name="q", dim=[1, 2, 8, 16])
    k = g.tensor(name="k", dim=[1, 2, 8, 16])
    v = g.tensor(name="v", dim=[1, 2, 8, 16])
    with pytest.raises(GraphValidationError, match=message):
        o, _ = g.sdpa(name="attn", q=q, k=k, v=v, **kwargs)
        o.set_output(True)
        g.validate()


def test_sdpa_head_and_dtype_errors():
    g = cudnn.pygraph(io_data_type=BF16, handle=CPU)
    q = g.tensor(name="q", dim=[1, 3, 8, 16])
    k = g.tensor(name="k", dim=[1, 2, 8, 16])
    g.sdpa(name="attn", q=q, k=k, v=k, is_inference=True)[0].set_output(True)
    with pytest.raises(GraphValidationError, match=r"q heads \(3\) must be a multiple of k heads \(2\)"):
        g.validate()
    g = cudnn.pygraph(handle=CPU)
    q = g.tensor(name="q", dim=[1, 2, 8, 16], data_type=BF16)
    k = g.tensor(name="k", dim=[1, 2, 8, 16], data_type=cudnn.data_type.HALF)
    g.sdpa(name="attn", q=q, k=k, v=k, is_inference=True)[0].set_output(True)
    with pytest.raises(GraphValidationError, match="must share one dtype"):
        g.validate()


def test_lifecycle_order_is_enforced():
    g, *_ = _mm_graph()
    with pytest.raises(RuntimeError, match="not validated"):
        g.create_execution_plans([cudnn.heur_mode.A])
    g.validate()
    with pytest.raises(RuntimeError, match="build_operation_graph"):
        g.create_execution_plans([cudnn.heur_mode.A])
    with pytest.raises(RuntimeError, match="no built plan"):
        g.get_workspace_size()


# -- execute ----------------------------------------------------------------------------------------
def test_missing_input_names_it():
    g, a, b, c, pack = _built()
    del pack[b]
    with pytest.raises(ValueError, match=r"variant pack is missing input 'b' \(uid 2"):
        g.execute(pack, None)


def test_missing_output_names_it():
    g, a, b, c, pack = _built()
    del pack[c]
    with pytest.raises(ValueError, match=r"variant pack is missing output 'mm::C'"):
        g.execute(pack, None)


def test_unknown_uid():
    g, a, b, c, pack = _built()
    pack[999] = torch.empty(1)
    with pytest.raises(ValueError, match=r"variant pack names unknown uid 999; the graph's uids are \[1, 2, 3\]"):
        g.execute(pack, None)


def test_bound_shape_stride_and_dtype_mismatch():
    g, a, b, c, pack = _built()
    with pytest.raises(ValueError, match=r"'a' .*: bound tensor has shape \(1, 8, 15\) but the graph declares \(1, 8, 16\)"):
        g.execute({**pack, a: torch.randn(1, 8, 15)}, None)
    with pytest.raises(ValueError, match=r"'a' .*: bound tensor has stride \(128, 1, 8\) but the graph declares \(128, 16, 1\)"):
        g.execute({**pack, a: torch.randn(1, 16, 8).transpose(1, 2)}, None)
    with pytest.raises(ValueError, match=r"'b' .*: bound tensor has dtype bf16 but the graph declares fp32"):
        g.execute({**pack, b: torch.randn(1, 16, 4).bfloat16()}, None)


def test_virtual_tensor_in_pack_and_foreign_tensor_key():
    g = cudnn.pygraph(io_data_type=FP32, handle=CPU)
    x = g.tensor(name="x", dim=[4])
    y = g.exp(input=x, name="e")
    z = g.neg(input=y, name="n")
    z.set_output(True)
    g.build()
    with pytest.raises(ValueError, match=r"binds 'e::OUT_0' .*a virtual \(intermediate\) tensor"):
        g.execute({x: torch.randn(4), z: torch.empty(4), y: torch.empty(4)}, None)
    other = cudnn.pygraph().tensor(name="other", dim=[4])
    with pytest.raises(ValueError, match="is not a tensor of this graph"):
        g.execute({x: torch.randn(4), z: torch.empty(4), other: torch.empty(4)}, None)


def test_operands_on_two_devices():
    g, a, b, c, pack = _built()
    with pytest.raises(ValueError, match="all operands share one device"):
        g.execute({**pack, c: torch.empty(1, 8, 4, device="meta")}, None)


class _WsPlan(Plan):
    name = "ws_engine"

    def get_workspace_size(self):
        return 512

    def execute(self, variant_pack, workspace, stream, **kwargs):
        self.seen = workspace


class _WsEngine(Engine):
    name = "ws_engine"
    priority = 5

    def check_support(self, graph):
        return None

    def build_plan(self, graph):
        return _WsPlan()


def _ws_graph():
    reg = EngineRegistry()
    reg.add(_WsEngine())
    g, a, b, c = _mm_graph()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A], registry=reg)
    g.check_support()
    g.build_plans()
    return g, {a: torch.randn(1, 8, 16), b: torch.randn(1, 16, 4), c: torch.empty(1, 8, 4)}


def test_workspace_none_too_small_wrong_device_wrong_dtype():
    g, pack = _ws_graph()
    assert g.get_workspace_size() == 512
    with pytest.raises(ValueError, match=r"requires a 512-byte workspace but execute\(\) received none"):
        g.execute(pack, None)
    with pytest.raises(ValueError, match=r"workspace holds 256 bytes but 512 are required"):
        g.execute(pack, torch.empty(256, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"workspace is on meta but the operands are on cpu"):
        g.execute(pack, torch.empty(512, dtype=torch.uint8, device="meta"))
    with pytest.raises(ValueError, match=r"contiguous 1-D torch.uint8"):
        g.execute(pack, torch.empty(512, dtype=torch.float32))
    raw = torch.empty(4096 + 128, dtype=torch.uint8)
    ws = raw[(-raw.data_ptr()) % 128 :][:4096]  # 128-byte aligned, as Workspace.over requires
    g.execute(pack, ws)
    assert g._built()[1].seen is ws


def test_workspace_on_wrong_device_even_when_none_is_needed():
    g, a, b, c, pack = _built()
    assert g.get_workspace_size() == 0
    with pytest.raises(ValueError, match="workspace is on meta but the operands are on cpu"):
        g.execute(pack, torch.empty(16, dtype=torch.uint8, device="meta"))


def test_overrides_validated_as_a_set_and_need_the_flag():
    g, a, b, c, pack = _built()
    with pytest.raises(ValueError, match="is_override_shape_enabled=True"):
        g.execute(pack, None, override_uids=[a.uid], override_shapes=[[1, 8, 16]], override_strides=[[128, 16, 1]])
    g, a, b, c, pack = _built(is_override_shape_enabled=True)
    with pytest.raises(ValueError, match="need override_uids, override_shapes and override_strides together"):
        g.execute(pack, None, override_uids=[a.uid], override_shapes=[[1, 8, 16]])
    with pytest.raises(ValueError, match="differ in length"):
        g.execute(pack, None, override_uids=[a.uid, b.uid], override_shapes=[[1, 8, 16]], override_strides=[[128, 16, 1]])
    with pytest.raises(ValueError, match="unknown uid 42"):
        g.execute(pack, None, override_uids=[42], override_shapes=[[1, 8, 16]], override_strides=[[128, 16, 1]])
    with pytest.raises(ValueError, match="must keep rank 3"):
        g.execute(pack, None, override_uids=[a.uid], override_shapes=[[8, 16]], override_strides=[[16, 1]])


def test_plan_without_override_support_is_rejected_before_launch():
    class NoOverridePlan(_WsPlan):
        def execute(self, variant_pack, workspace, stream, **kwargs):
            raise AssertionError("launched")

    class E(_WsEngine):
        def build_plan(self, graph):
            return NoOverridePlan()

    reg = EngineRegistry()
    reg.add(E())
    g, a, b, c = _mm_graph()  # not override-enabled: the plan builds ...
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(registry=reg)
    g.build_plans()
    g.is_override_shape_enabled = True  # ... and an override at execute must raise, not launch
    with pytest.raises(ValueError, match="cannot consume execute-time shape/stride overrides; nothing was launched"):
        g.execute(
            {a: torch.randn(1, 8, 16), b: torch.randn(1, 16, 4), c: torch.empty(1, 8, 4)},
            torch.empty(512, dtype=torch.uint8),
            override_uids=[a.uid],
            override_shapes=[[1, 8, 16]],
            override_strides=[[128, 16, 1]],
        )


def test_handle_errors_and_invalidation_after_change():
    g, a, b, c, pack = _built()
    h = cudnn.create_handle(device="cpu")
    cudnn.set_stream(handle=h, stream=None)
    assert cudnn.get_stream(h) is None
    g.execute(pack, None, handle=h)
    cudnn.destroy_handle(h)
    with pytest.raises(ValueError, match="was destroyed"):
        g.execute(pack, None, handle=h)
    with pytest.raises(ValueError, match="differs from the operands' device"):
        g.execute(pack, None, handle=cudnn.create_handle(device="cuda:0"))
    a.set_dim([1, 8, 16])  # any change after build invalidates the plans
    with pytest.raises(RuntimeError, match="changed after its plans were built"):
        g.execute(pack, None)
    g.build()
    g.execute(pack, None)
    a.set_dim([1, 5, 16]).set_stride([80, 16, 1])  # a real shape change: the output's inferred dims follow on rebuild
    g.build()
    assert c.get_dim() == [1, 5, 4]
    a_t, b_t, c_t = torch.randn(1, 5, 16), pack[b], torch.full((1, 5, 4), float("nan"))
    g.execute({a: a_t, b: b_t, c: c_t}, None)
    torch.testing.assert_close(c_t, a_t @ b_t)
