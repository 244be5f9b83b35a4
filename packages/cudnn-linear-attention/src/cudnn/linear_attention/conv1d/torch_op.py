"""Torch custom ops of causal_conv1d: ``torch.ops.cudnn_linear_attention.causal_conv1d_{fwd,bwd,update}``.

Thin: each op looks up (or builds once) the APIBase plan for its plan-time signature, allocates its
outputs on torch's current stream (the launch stream of this layer) and calls ``execute``. Fake
implementations give torch.compile the output metadata; autograd of the forward runs the backward op
(our kernels). ``final_states`` is not differentiable.

Eager fast path of the public forward (:func:`causal_conv1d`, ``DIRECT_EAGER``): where the custom op's dispatch can
change nothing -- no torch.compile / jit tracing, no torch function or dispatch mode, no functorch transform, no
autograd (grad mode off or no input requiring grad), plain CUDA tensors and a str / None activation -- it calls the
op's body directly, skipping torch's custom-op dispatch (about 20 us of Python per call on the CPU host). The body,
its plan, its outputs and its errors are the custom op's; every other call goes through the op.

Defaults since session 6 (the H200's ``ours-fast`` column: eager T16k x D4096 3358 GB/s vs 1602 for the old defaults, the
kernel alone 3381): the direct eager call on (``DIRECT_EAGER``), the forward plans on the tvm-ffi launch route
(``FWD_TVM_FFI``, where apache-tvm-ffi is importable) and the adapter's memoized validation (``api.FAST_HOST_DEFAULT``);
the forward plans' grid is the adapter's default (``api.FWD_GRID_CTAS_DEFAULT``: the run grid, 4 x the SMs of x's device).

The decode update since session 9, the same three: ``UPDATE_DIRECT_EAGER`` (the public update calls the op body directly
under the same rule, bumping ``conv_state``'s version counter as the mutating op does), ``UPDATE_TVM_FFI`` and
``api.UPDATE_FAST_HOST_DEFAULT`` (about 59 -> 11 us of Python per call on the CPU host, kernel stubbed).
"""

from __future__ import annotations

import torch
from torch.autograd.graph import increment_version as _increment_version

from .._host.eager import plain_tensors
from .._host.launch import tvm_ffi_available
from . import api as _api
from .api import CausalConv1d, CausalConv1dBackward, CausalConv1dUpdate

_NS = "cudnn_linear_attention"


_PLANS: dict = {}
#: The public forward calls the op body directly where torch's dispatch can change nothing (see the module docstring):
#: on since session 6 (with FAST_HOST_DEFAULT and FWD_TVM_FFI: the ``ours-fast`` column of benchmarks/linear_attention.py).
DIRECT_EAGER = True
#: Launch route of the plans the forward op builds: the tvm-ffi entry (True; the DSL's own entry where apache-tvm-ffi is
#: not importable: the same device code), the DSL's own (False), or None for the adapter's default (``CUDNN_LA_TVM_FFI``).
#: Part of the op's plan key. True since session 6.
FWD_TVM_FFI: bool | None = True
#: The public decode update calls the update op's body directly where torch's dispatch can change nothing, as the forward
#: (``DIRECT_EAGER``), bumping ``conv_state``'s version counter first as the mutating custom op does. Session 9.
UPDATE_DIRECT_EAGER = True
#: Launch route of the plans the decode update op builds, as ``FWD_TVM_FFI`` (session 9: the update kernel's tvm-ffi entry
#: is bitwise its DSL entry on the H200, test_conv1d_gpu.py::test_tvm_ffi_launch_route_matches_the_dsl_entry_bit_for_bit).
UPDATE_TVM_FFI: bool | None = True


def _plan(key, make):
    plan = _PLANS.get(key)
    if plan is None:
        plan = make()
        plan.compile()
        _PLANS[key] = plan
    return plan


def _n_seqs(x, cu_seqlens) -> int:
    if cu_seqlens is not None:
        return cu_seqlens.shape[0] - 1
    return x.shape[0] if x.dim() == 3 else 1


def _sig(t):
    return None if t is None else (t.dtype, t.dim())


def _vector_states(t) -> bool | None:
    """Whether initial states ``t`` are a contiguous [N, D, W - 1] at a 16-byte aligned address: a plan built from such
    states reads them by vectors where it seeds its chunks (``Conv1dFwdKey.init_contiguous``) and refuses other ones."""
    if t is None:
        return None
    return _api._contiguous_states(tuple(t.shape), tuple(t.stride())) and t.data_ptr() % 16 == 0


def _fwd_key(x, weight, bias, cu_seqlens, initial_states, activation, output_final_states):
    dense = None if cu_seqlens is not None else (tuple(x.shape), tuple(x.stride()))
    return (
        "fwd",
        x.device,
        x.dtype,
        x.dim(),
        tuple(weight.shape),
        weight.dtype,
        bias is not None,
        _sig(cu_seqlens),
        _sig(initial_states),
        _vector_states(initial_states),
        activation,
        output_final_states,
        dense,
        FWD_TVM_FFI,
        _api.FAST_HOST_DEFAULT,  # a plan's fast_host is fixed at construction
        _api.FWD_GRID_CTAS_DEFAULT,  # and so is its grid (None: 4 x the SMs of x.device, already in the key)
        _api.FWD_L2_PREFETCH_DEFAULT,  # and its L2 prefetch distance
        _api.FWD_STEADY_DEFAULT,  # and its steady-group path
        _api.FWD_CHUNK_DEFAULT,  # and its chunk (dense / varlen defaults)
        _api.FWD_CHUNK_VARLEN_DEFAULT,
        _api.FWD_FINAL_FUSED_DEFAULT,  # and whether its forward kernel writes the final states (dense / varlen defaults)
        _api.FWD_FINAL_FUSED_VARLEN_DEFAULT,
        _api.FWD_FINAL_TAIL_DEFAULT,  # and where the fused kernel writes them (dense / varlen defaults)
        _api.FWD_FINAL_TAIL_VARLEN_DEFAULT,
        _api.FWD_WARP_WALK_DEFAULT,  # and its varlen cu_seqlens walk
        _api.FWD_VARLEN_STATELESS_WALK_CHUNK,  # (the walk and its chunk of varlen plans without states)
        _api.FWD_SHIFT_ALWAYS_DEFAULT,  # and its per-token path's window shift
        _api.FWD_LOCATE_GUESS_DEFAULT,  # and its runs' first-sequence search
        _api.FWD_SEEDED_STARTS_DEFAULT,  # and its chunks' seeded starts (for sequences up to FWD_SEEDED_MAX_LEN tokens)
        _api.FWD_SEEDED_MAX_LEN,
        _api.FWD_VARLEN_CHUNK_PER_CALL,  # and its varlen per-call chunks (the rule's length is read per call)
    )


def _make_fwd_plan(x, weight, y, bias, cu_seqlens, initial_states, fin, activation):
    plan = CausalConv1d(x, weight, y, bias, cu_seqlens, initial_states, fin, activation)
    if FWD_TVM_FFI is not None:
        plan.tvm_ffi = bool(FWD_TVM_FFI) and tvm_ffi_available()
    return plan


def _fwd_body(x, weight, bias, cu_seqlens, initial_states, activation, output_final_states, placeholder=True):
    """The forward op's implementation (also what the eager fast path of :func:`causal_conv1d` calls). Without
    ``output_final_states`` the op returns an empty placeholder as final states (``placeholder=False``: None instead,
    for the fast path, whose caller discards it)."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    d, width = weight.shape
    if output_final_states:
        sdt = initial_states.dtype if initial_states is not None else x.dtype
        final = fin = torch.empty((_n_seqs(x, cu_seqlens), d, width - 1), dtype=sdt, device=x.device)
    else:
        fin = None
        final = torch.empty((0,), dtype=initial_states.dtype if initial_states is not None else x.dtype, device=x.device) if placeholder else None
    key = _fwd_key(x, weight, bias, cu_seqlens, initial_states, activation, output_final_states)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(key, lambda: _make_fwd_plan(x, weight, y, bias, cu_seqlens, initial_states, fin, activation))
    plan.execute(x, weight, y, bias, cu_seqlens, initial_states, fin)
    return y, final


@torch.library.custom_op(f"{_NS}::causal_conv1d_fwd", mutates_args=())
def causal_conv1d_fwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    activation: str | None,
    output_final_states: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _fwd_body(x, weight, bias, cu_seqlens, initial_states, activation, output_final_states)


@causal_conv1d_fwd.register_fake
def _(x, weight, bias, cu_seqlens, initial_states, activation, output_final_states):
    d, width = weight.shape
    sdt = initial_states.dtype if initial_states is not None else x.dtype
    if output_final_states:
        n = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else (x.shape[0] if x.dim() == 3 else 1)
        final = x.new_empty((n, d, width - 1), dtype=sdt)
    else:
        final = x.new_empty((0,), dtype=sdt)
    return x.new_empty(x.shape), final


@torch.library.custom_op(f"{_NS}::causal_conv1d_bwd", mutates_args=())
def causal_conv1d_bwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    dy: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    activation: str | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = torch.empty_like(weight, memory_format=torch.contiguous_format)
    db = torch.empty_like(bias) if bias is not None else None
    dinit = torch.empty_like(initial_states) if initial_states is not None else None
    dense = None if cu_seqlens is not None else (tuple(x.shape), tuple(x.stride()), tuple(dy.stride()))
    key = ("bwd", x.device, x.dtype, x.dim(), tuple(weight.shape), weight.dtype, bias is not None, _sig(cu_seqlens), _sig(initial_states), activation, dense)
    plan = _plan(key, lambda: CausalConv1dBackward(x, weight, dy, dx, dw, bias, db, cu_seqlens, initial_states, dinit, activation))
    workspace = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device=x.device)
    plan.execute(x, weight, dy, dx, dw, bias, db, cu_seqlens, initial_states, dinit, workspace=workspace)
    # Absent gradients are distinct empty tensors: custom-op outputs may not alias one another.
    return dx, dw, (db if db is not None else x.new_empty((0,))), (dinit if dinit is not None else x.new_empty((0,)))


@causal_conv1d_bwd.register_fake
def _(x, weight, bias, dy, cu_seqlens, initial_states, activation):
    return (
        x.new_empty(x.shape),
        weight.new_empty(weight.shape),
        bias.new_empty(bias.shape) if bias is not None else x.new_empty((0,)),
        initial_states.new_empty(initial_states.shape) if initial_states is not None else x.new_empty((0,)),
    )


def _setup_context(ctx, inputs, output):
    x, weight, bias, cu_seqlens, initial_states, activation, _ = inputs
    ctx.save_for_backward(x, weight, bias, cu_seqlens, initial_states)
    ctx.activation = activation
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, dy, _dfinal):
    x, weight, bias, cu_seqlens, initial_states = ctx.saved_tensors
    dx, dw, db, dinit = causal_conv1d_bwd(x, weight, bias, dy, cu_seqlens, initial_states, ctx.activation)
    return dx, dw, (db if bias is not None else None), None, (dinit if initial_states is not None else None), None, None


causal_conv1d_fwd.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op(f"{_NS}::causal_conv1d_update", mutates_args=("conv_state",))
def causal_conv1d_update_op(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    conv_state_indices: torch.Tensor | None,
) -> torch.Tensor:
    return _update_body(x, conv_state, weight, bias, activation, conv_state_indices)


def _update_key(x, conv_state, weight, bias, activation, conv_state_indices):
    """The update op's plan key: everything its plan is built for (the plan validates the rest per call)."""
    return (
        "update", x.device, x.dtype, x.shape, weight.shape, weight.dtype, bias is not None, conv_state.dtype, conv_state.shape,
        conv_state.stride(), activation, _sig(conv_state_indices), UPDATE_TVM_FFI, _api.UPDATE_FAST_HOST_DEFAULT,
    )  # fmt: skip


def _make_update_plan(x, conv_state, weight, out, bias, conv_state_indices, activation):
    plan = CausalConv1dUpdate(x, conv_state, weight, out, bias, conv_state_indices, activation)
    if UPDATE_TVM_FFI is not None:
        plan.tvm_ffi = bool(UPDATE_TVM_FFI) and tvm_ffi_available()
    return plan


def _update_body(x, conv_state, weight, bias, activation, conv_state_indices):
    """The update op's implementation (also what the eager fast path of :func:`causal_conv1d_update` calls)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    key = _update_key(x, conv_state, weight, bias, activation, conv_state_indices)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(key, lambda: _make_update_plan(x, conv_state, weight, out, bias, conv_state_indices, activation))
    plan.execute(x, conv_state, weight, out, bias, conv_state_indices)
    return out


@causal_conv1d_update_op.register_fake
def _(x, conv_state, weight, bias, activation, conv_state_indices):
    return x.new_empty(x.shape)


def _direct_ok(enabled, activation, *tensors) -> bool:
    """Whether the eager fast path may call the op body directly (see the module docstring; the dispatch-state and
    tensor checks are ``_host/eager.py``'s, shared with the delta-rule forwards). ``enabled``: ``DIRECT_EAGER`` (forward)
    or ``UPDATE_DIRECT_EAGER`` (update)."""
    if not enabled or not (activation is None or type(activation) is str):
        return False
    return plain_tensors(tensors, _served)


def _served(t) -> bool:
    """The device types the fast path takes (CUDA; a meta tensor, for one, must reach the op's fake implementation)."""
    return t.is_cuda


def causal_conv1d(x, weight, bias=None, activation=None, cu_seqlens=None, initial_states=None, output_final_states=False):
    if not torch.compiler.is_compiling() and _direct_ok(DIRECT_EAGER, activation, x, weight, bias, cu_seqlens, initial_states):
        y, final = _fwd_body(x, weight, bias, cu_seqlens, initial_states, activation, bool(output_final_states), False)
    else:
        y, final = causal_conv1d_fwd(x, weight, bias, cu_seqlens, initial_states, activation, bool(output_final_states))
    return (y, final) if output_final_states else y


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None):
    if not torch.compiler.is_compiling() and _direct_ok(UPDATE_DIRECT_EAGER, activation, x, conv_state, weight, bias, conv_state_indices):
        _increment_version(conv_state)  # what the mutating custom op does, before its body (in inference mode too)
        return _update_body(x, conv_state, weight, bias, activation, conv_state_indices)
    return causal_conv1d_update_op(x, conv_state, weight, bias, activation, conv_state_indices)
