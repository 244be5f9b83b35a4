"""Enumerations of the graph API, spelled as upstream's ``cudnn`` module spells them. Pure Python."""

from __future__ import annotations

import enum


class heur_mode(enum.Enum):  # noqa: N801 - upstream's spelling
    """Heuristics modes for ``create_execution_plans``. Every mode yields the Router's one ranked engine list."""

    A = "A"
    B = "B"
    FALLBACK = "FALLBACK"
    OPENSOURCE = "OPENSOURCE"


class build_plan_policy(enum.Enum):  # noqa: N801
    """``build_plans`` policy: build the first plan that builds, or every plan that builds."""

    HEURISTICS_CHOICE = "HEURISTICS_CHOICE"
    ALL = "ALL"


class norm_forward_phase(enum.Enum):  # noqa: N801
    INFERENCE = "INFERENCE"
    TRAINING = "TRAINING"
    NOT_SET = "NOT_SET"


class reduction_mode(enum.Enum):  # noqa: N801
    ADD = "ADD"
    MUL = "MUL"
    MIN = "MIN"
    MAX = "MAX"
    AMAX = "AMAX"
    AVG = "AVG"
    NORM1 = "NORM1"
    NORM2 = "NORM2"
    MUL_NO_ZEROS = "MUL_NO_ZEROS"
    NOT_SET = "NOT_SET"


class diagonal_alignment(enum.Enum):  # noqa: N801
    """Where the diagonal of an sdpa band mask sits: top-left (row i sees kv i) or bottom-right (row s_q-1 sees kv s_kv-1)."""

    TOP_LEFT = "TOP_LEFT"
    BOTTOM_RIGHT = "BOTTOM_RIGHT"


class attention_implementation(enum.Enum):  # noqa: N801
    AUTO = "AUTO"
    COMPOSITE = "COMPOSITE"
    UNIFIED = "UNIFIED"


class pointwise_mode(enum.Enum):  # noqa: N801
    """The pointwise node's ``attrs["mode"]`` (upstream ``PointwiseMode_t``)."""

    ADD = "ADD"
    ADD_SQUARE = "ADD_SQUARE"
    DIV = "DIV"
    MAX = "MAX"
    MIN = "MIN"
    MOD = "MOD"
    MUL = "MUL"
    POW = "POW"
    SUB = "SUB"
    ABS = "ABS"
    CEIL = "CEIL"
    COS = "COS"
    EXP = "EXP"
    FLOOR = "FLOOR"
    LOG = "LOG"
    NEG = "NEG"
    RSQRT = "RSQRT"
    SIN = "SIN"
    SQRT = "SQRT"
    TAN = "TAN"
    ERF = "ERF"
    IDENTITY = "IDENTITY"
    RECIPROCAL = "RECIPROCAL"
    RELU_FWD = "RELU_FWD"
    TANH_FWD = "TANH_FWD"
    SIGMOID_FWD = "SIGMOID_FWD"
    ELU_FWD = "ELU_FWD"
    GELU_FWD = "GELU_FWD"
    SOFTPLUS_FWD = "SOFTPLUS_FWD"
    SWISH_FWD = "SWISH_FWD"
    GELU_APPROX_TANH_FWD = "GELU_APPROX_TANH_FWD"
    RELU_BWD = "RELU_BWD"
    TANH_BWD = "TANH_BWD"
    SIGMOID_BWD = "SIGMOID_BWD"
    ELU_BWD = "ELU_BWD"
    GELU_BWD = "GELU_BWD"
    SOFTPLUS_BWD = "SOFTPLUS_BWD"
    SWISH_BWD = "SWISH_BWD"
    GELU_APPROX_TANH_BWD = "GELU_APPROX_TANH_BWD"
    CMP_EQ = "CMP_EQ"
    CMP_NEQ = "CMP_NEQ"
    CMP_GT = "CMP_GT"
    CMP_GE = "CMP_GE"
    CMP_LT = "CMP_LT"
    CMP_LE = "CMP_LE"
    LOGICAL_AND = "LOGICAL_AND"
    LOGICAL_OR = "LOGICAL_OR"
    LOGICAL_NOT = "LOGICAL_NOT"
    GEN_INDEX = "GEN_INDEX"
    BINARY_SELECT = "BINARY_SELECT"


class scalar_type(enum.Enum):  # noqa: N801
    RUNTIME_PARAM = "RUNTIME_PARAM"
    COMPILE_TIME_CONST = "COMPILE_TIME_CONST"


class tensor_reordering(enum.Enum):  # noqa: N801
    NONE = "NONE"
    INT8x32 = "INT8x32"
    F16x16 = "F16x16"
    F8_128x4 = "F8_128x4"
