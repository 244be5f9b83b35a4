"""Pointwise node builders of ``cudnn.pygraph`` with upstream's names and argument names. Pure Python.

Every builder returns the output tensor (virtual until ``set_output(True)``). Operands are graph tensors
or Python numbers (a number becomes a by-value constant of the other operand's rank).
"""

from __future__ import annotations

from ..datatypes import data_type
from .enums import pointwise_mode as pm

NOT_SET = data_type.NOT_SET

#: method name -> mode, for ``op(input, compute_data_type, name)``
UNARY = {
    "abs": pm.ABS,
    "ceil": pm.CEIL,
    "cos": pm.COS,
    "erf": pm.ERF,
    "exp": pm.EXP,
    "floor": pm.FLOOR,
    "gelu": pm.GELU_FWD,
    "gelu_approx_tanh": pm.GELU_APPROX_TANH_FWD,
    "identity": pm.IDENTITY,
    "log": pm.LOG,
    "logical_not": pm.LOGICAL_NOT,
    "neg": pm.NEG,
    "reciprocal": pm.RECIPROCAL,
    "rsqrt": pm.RSQRT,
    "sigmoid": pm.SIGMOID_FWD,
    "sin": pm.SIN,
    "softplus": pm.SOFTPLUS_FWD,
    "sqrt": pm.SQRT,
    "tan": pm.TAN,
    "tanh": pm.TANH_FWD,
    "elu": pm.ELU_FWD,
}
#: ``op(a, b, compute_data_type, name)``
BINARY_AB = {
    "add": pm.ADD,
    "sub": pm.SUB,
    "mul": pm.MUL,
    "div": pm.DIV,
    "add_square": pm.ADD_SQUARE,
    "logical_and": pm.LOGICAL_AND,
    "logical_or": pm.LOGICAL_OR,
}
#: ``op(input0, input1, compute_data_type, name)``
BINARY_01 = {"max": pm.MAX, "min": pm.MIN, "mod": pm.MOD, "pow": pm.POW}
#: ``op(input, comparison, compute_data_type, name)``
COMPARE = {"cmp_eq": pm.CMP_EQ, "cmp_neq": pm.CMP_NEQ, "cmp_gt": pm.CMP_GT, "cmp_ge": pm.CMP_GE, "cmp_lt": pm.CMP_LT, "cmp_le": pm.CMP_LE}
#: ``op(loss, input, compute_data_type, name)``: the gradient of the forward op at ``input``, times ``loss``
BACKWARD = {
    "tanh_backward": pm.TANH_BWD,
    "sigmoid_backward": pm.SIGMOID_BWD,
    "elu_backward": pm.ELU_BWD,
    "gelu_backward": pm.GELU_BWD,
    "gelu_approx_tanh_backward": pm.GELU_APPROX_TANH_BWD,
    "softplus_backward": pm.SOFTPLUS_BWD,
}


def _unary(mode, method):
    def op(self, input, compute_data_type=NOT_SET, name=""):
        return self._pointwise(mode, [input], compute_data_type, name, method)

    op.__name__ = method
    op.__doc__ = f"Pointwise {mode.name}: ``{method}(input, compute_data_type, name)`` -> output tensor."
    return op


def _binary_ab(mode, method):
    def op(self, a, b, compute_data_type=NOT_SET, name=""):
        return self._pointwise(mode, [a, b], compute_data_type, name, method)

    op.__name__ = method
    op.__doc__ = f"Pointwise {mode.name}: ``{method}(a, b, compute_data_type, name)`` -> output tensor."
    return op


def _binary_01(mode, method):
    def op(self, input0, input1, compute_data_type=NOT_SET, name=""):
        return self._pointwise(mode, [input0, input1], compute_data_type, name, method)

    op.__name__ = method
    op.__doc__ = f"Pointwise {mode.name}: ``{method}(input0, input1, compute_data_type, name)`` -> output tensor."
    return op


def _compare(mode, method):
    def op(self, input, comparison, compute_data_type=NOT_SET, name=""):
        return self._pointwise(mode, [input, comparison], compute_data_type, name, method)

    op.__name__ = method
    op.__doc__ = f"Pointwise {mode.name}: ``{method}(input, comparison, compute_data_type, name)`` -> 1 where true, else 0."
    return op


def _backward(mode, method):
    def op(self, loss, input, compute_data_type=NOT_SET, name=""):
        return self._pointwise(mode, [loss, input], compute_data_type, name, method)

    op.__name__ = method
    op.__doc__ = f"Pointwise {mode.name}: ``{method}(loss, input, compute_data_type, name)`` = loss * d{method[: -len('_backward')]}/dinput."
    return op


class PointwiseOps:
    """Mixin of ``cudnn.pygraph``: the pointwise builders (``_pointwise`` lives in the builder)."""

    def bias(self, input, bias, compute_data_type=NOT_SET, name=""):
        """``input + bias`` (upstream's ADD spelled for an epilogue)."""
        return self._pointwise(pm.ADD, [input, bias], compute_data_type, name, "bias")

    def scale(self, input, scale, compute_data_type=NOT_SET, name=""):
        """``input * scale``."""
        return self._pointwise(pm.MUL, [input, scale], compute_data_type, name, "scale")

    def binary_select(self, input0, input1, mask, compute_data_type=NOT_SET, name=""):
        """``mask ? input0 : input1``."""
        return self._pointwise(pm.BINARY_SELECT, [input0, input1, mask], compute_data_type, name, "binary_select")

    def relu(self, input, negative_slope=None, lower_clip=None, upper_clip=None, compute_data_type=NOT_SET, name=""):
        """``x > lower ? min(x, upper) : lower + negative_slope * (x - lower)`` (lower defaults to 0, slope to 0)."""
        attrs = {"relu_lower_clip_slope": negative_slope, "relu_lower_clip": lower_clip, "relu_upper_clip": upper_clip}
        return self._pointwise(pm.RELU_FWD, [input], compute_data_type, name, "relu", attrs)

    def leaky_relu(self, input, negative_slope, compute_data_type=NOT_SET, name=""):
        return self._pointwise(pm.RELU_FWD, [input], compute_data_type, name, "leaky_relu", {"relu_lower_clip_slope": negative_slope})

    def relu_backward(self, loss, input, negative_slope=None, lower_clip=None, upper_clip=None, compute_data_type=NOT_SET, name=""):
        attrs = {"relu_lower_clip_slope": negative_slope, "relu_lower_clip": lower_clip, "relu_upper_clip": upper_clip}
        return self._pointwise(pm.RELU_BWD, [loss, input], compute_data_type, name, "relu_backward", attrs)

    def leaky_relu_backward(self, loss, input, negative_slope, compute_data_type=NOT_SET, name=""):
        return self._pointwise(pm.RELU_BWD, [loss, input], compute_data_type, name, "leaky_relu_backward", {"relu_lower_clip_slope": negative_slope})

    def swish(self, input, swish_beta=None, compute_data_type=NOT_SET, name=""):
        """``x * sigmoid(swish_beta * x)`` (beta defaults to 1: SiLU)."""
        return self._pointwise(pm.SWISH_FWD, [input], compute_data_type, name, "swish", {"swish_beta": swish_beta})

    def silu(self, input, compute_data_type=NOT_SET, name=""):
        """``swish`` with beta 1 (a convenience name; upstream spells it ``swish``)."""
        return self._pointwise(pm.SWISH_FWD, [input], compute_data_type, name, "silu", {"swish_beta": None})

    def swish_backward(self, loss, input, compute_data_type=NOT_SET, swish_beta=None, name=""):
        return self._pointwise(pm.SWISH_BWD, [loss, input], compute_data_type, name, "swish_backward", {"swish_beta": swish_beta})

    def gen_index(self, input, axis, compute_data_type=NOT_SET, name=""):
        """The index along ``axis`` of every element of ``input``'s shape (INT32 by default)."""
        return self._pointwise(pm.GEN_INDEX, [input], compute_data_type, name, "gen_index", {"axis": int(axis)})


for _table, _make in ((UNARY, _unary), (BINARY_AB, _binary_ab), (BINARY_01, _binary_01), (COMPARE, _compare), (BACKWARD, _backward)):
    for _method, _mode in _table.items():
        setattr(PointwiseOps, _method, _make(_mode, _method))

#: Every pointwise builder name (docs and tests enumerate it).
POINTWISE_METHODS = sorted(
    [*UNARY, *BINARY_AB, *BINARY_01, *COMPARE, *BACKWARD]
    + ["bias", "scale", "binary_select", "relu", "leaky_relu", "relu_backward", "leaky_relu_backward", "swish", "silu", "swish_backward", "gen_index"]
)
