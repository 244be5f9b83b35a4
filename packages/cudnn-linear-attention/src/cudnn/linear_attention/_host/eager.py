"""The direct eager call of the linear-attention public wrappers (causal_conv1d, Gated DeltaNet, Kimi Delta Attention).

A public wrapper that runs as a torch custom op may call the op's body directly -- skipping torch's custom-op dispatch,
about 20 us of Python per call on the CPU host -- only where that dispatch can change nothing:

- :func:`dispatch_state`: no jit tracing, no torch function mode, no dispatch mode (FakeTensor, functionalization,
  ``TorchDispatchMode`` subclasses), no functorch transform (vmap / grad / jvp);
- :func:`plain_tensors`: every tensor argument is a plain ``torch.Tensor`` / ``nn.Parameter`` (no subclass: those have
  their own ``__torch_function__`` / ``__torch_dispatch__``), on a device the caller serves (``served``: CUDA), and none
  requires grad while grad mode is on (autograd must record the op);
- the caller also checks ``torch.compiler.is_compiling()`` (dynamo traces the op, never the body).

The body, its plan, its outputs and its errors are the custom op's; every other call goes through the op. Imports torch
at module import: reached only from the public wrappers at call time.
"""

from __future__ import annotations

import torch

#: The tensor types the direct call takes (exactly these: a subclass may override torch function / dispatch).
PLAIN_TYPES: tuple = (torch.Tensor, torch.nn.Parameter)
_DISPATCH_STATE: list = []


def dispatch_state():
    """``() -> True`` when torch's global dispatch state leaves a custom op call nothing to do beyond its body: no jit
    tracing, no torch function mode, no dispatch mode, no functorch transform. None where this torch lacks one of the
    probes (then every call goes through the op). Probed once per process."""
    if not _DISPATCH_STATE:
        C = torch._C
        try:
            probes = (C._get_tracing_state, C._is_torch_function_mode_enabled, C._len_torch_dispatch_stack, C._functorch.peek_interpreter_stack)
        except AttributeError:
            _DISPATCH_STATE.append(None)
        else:
            tracing, fn_mode, dispatch_len, functorch = probes
            _DISPATCH_STATE.append(lambda: tracing() is None and not fn_mode() and dispatch_len() == 0 and functorch() is None)
    return _DISPATCH_STATE[0]


def is_cuda(t) -> bool:
    """The device type the direct call serves (CUDA; a meta tensor, for one, must reach the op's fake implementation)."""
    return t.is_cuda


def plain_tensors(tensors, served=is_cuda) -> bool:
    """Whether the dispatch state is plain (:func:`dispatch_state`) and every non-None tensor of ``tensors`` is a plain
    tensor that ``served`` accepts and that needs no autograd record (see the module docstring)."""
    plain = dispatch_state()
    if plain is None or not plain():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in PLAIN_TYPES or not served(t) or (grad and t.requires_grad)):
            return False
    return True
