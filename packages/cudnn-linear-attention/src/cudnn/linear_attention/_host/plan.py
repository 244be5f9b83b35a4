"""Plan bookkeeping shared by the linear-attention adapters: the descriptors a plan records and the
execute-time check that optional tensors match what the plan declared. Metadata only."""

from __future__ import annotations

from cudnn.api_base import as_desc


def set_descs(plan, **tensors) -> None:
    """``plan.<name> = as_desc(tensor, name)`` for every keyword (torch tensor, TensorDesc or None)."""
    for name, t in tensors.items():
        setattr(plan, name, as_desc(t, name))


def check_declared(what: str, plan, **tensors) -> None:
    """ValueError unless every optional execute tensor (keyword ``name=tensor or None``) is given exactly when
    the plan declared it (``plan.<name>`` is not None)."""
    for name, t in tensors.items():
        declared = getattr(plan, name)
        if (t is None) != (declared is None):
            raise ValueError(
                f"{what}: {name} was {'not ' if declared is None else ''}declared at plan time but execute() received {'a tensor' if t is not None else 'None'}"
            )
