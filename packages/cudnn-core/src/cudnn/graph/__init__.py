"""The graph API of ``cudnn`` (upstream cudnn frontend's Python ``pygraph``), in pure Python.

Build a graph, let the Router pick an engine from every installed family, execute it::

    graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT)
    ...
    graph.build([cudnn.heur_mode.A]); graph.execute(variant_pack, workspace, handle=handle)

Importing this package (and building graphs through ``check_support``) imports neither torch nor
cutlass; an engine's ``build_plan`` is the first place they load. Modules:

- ``builder``: ``pygraph`` (tensors, node builders, lifecycle, plan queries, execute)
- ``descriptors``: ``tensor``; ``nodes``: node kinds and their ports; ``enums``; ``handles``; ``errors``
- ``engine``: the engine contract (Rule 9) families implement; ``router``: discovery and ranking
- ``reference``: the pure-PyTorch oracle engine; ``wrapper``: the ``with cudnn.Graph(...)`` form
- ``binding``: the shared execute-time checks (variant pack, overrides, workspace)

Docs: docs/graph-api.md.
"""

from __future__ import annotations

from .builder import pygraph
from .descriptors import tensor
from .engine import Engine, EngineRegistry, Plan
from .enums import (
    attention_implementation,
    build_plan_policy,
    diagonal_alignment,
    heur_mode,
    norm_forward_phase,
    pointwise_mode,
    reduction_mode,
    scalar_type,
    tensor_reordering,
)
from .errors import GraphNotSupportedError, GraphValidationError, cudnnGraphNotSupportedError
from .handles import Handle, create_handle, destroy_handle, get_stream, set_stream
from .nodes import Node, register_graph_method, register_node_kind
from .wrapper import Graph

__all__ = [
    "pygraph",
    "Graph",
    "tensor",
    "heur_mode",
    "build_plan_policy",
    "norm_forward_phase",
    "reduction_mode",
    "pointwise_mode",
    "diagonal_alignment",
    "attention_implementation",
    "scalar_type",
    "tensor_reordering",
    "create_handle",
    "destroy_handle",
    "set_stream",
    "get_stream",
    "Handle",
    "Engine",
    "Plan",
    "EngineRegistry",
    "Node",
    "register_node_kind",
    "register_graph_method",
    "GraphValidationError",
    "GraphNotSupportedError",
    "cudnnGraphNotSupportedError",
]
