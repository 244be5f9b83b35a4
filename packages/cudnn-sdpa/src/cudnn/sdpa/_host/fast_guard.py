"""The ``fast_guard`` pieces both attention directions share: one C++ check (torch's dynamo ``TensorGuards``) of
every tensor argument's metadata stands in for building the metadata tuple in Python on a repeated execute().

A guard is ``(check, aliases, positions)`` over a call's tensor list: ``check`` is ``TensorGuards.check`` built from the
distinct tensors (``positions`` in the list; TensorGuards rejects a repeated object) with their sizes and strides as
static values, so it passes only tensors with the same dtype, device (type and index, through the dispatch keys),
requires_grad, sizes and strides; ``aliases`` lists the (first, later) positions that were one object, which a later
call must repeat. Pure Python: the TensorGuards class is passed in (each direction resolves it; tests stub it there).
"""

from __future__ import annotations


def guard_over(tensor_guards, tensors):
    """``(check, aliases, positions)`` for ``tensors`` (a call's tensor arguments, None left out), or None when
    ``tensor_guards`` (the class, or None where this torch has none) cannot build one that passes on them."""
    positions, aliases = [], []
    for i, t in enumerate(tensors):
        first = next((p for p in positions if tensors[p] is t), None)
        if first is None:
            positions.append(i)
        else:
            aliases.append((first, i))
    distinct = [tensors[i] for i in positions]
    try:
        guards = tensor_guards(*distinct, dynamic_dims_sizes=[list(t.shape) for t in distinct], dynamic_dims_strides=[list(t.stride()) for t in distinct])
        if guards.check(*distinct) is not True:
            return None
    except Exception:  # no TensorGuards, or one that takes other arguments: no guard (the memo path serves)
        return None
    return guards.check, tuple(aliases), tuple(positions)


def guard_passes(check, aliases, positions, tensors) -> bool:
    """Whether a call's tensor list (the guard's positions) repeats the guard's aliases and passes its check."""
    if not aliases:
        return check(*tensors)
    for first, later in aliases:
        if tensors[later] is not tensors[first]:
            return False
    return check(*[tensors[i] for i in positions])


def cached_guard(cache: dict, meta, passes, build, builds_max: int, cache_max: int):
    """The guard of the layout ``meta`` that just repeated: its cached guard when ``passes(guard)`` on this call, else a
    new ``build()`` (at most ``builds_max`` per layout: a guard built under another dispatch state, e.g. inference mode,
    fails on its own layout). Returns the guard; None: this layout is served by the memo path alone; False: ``build``
    made no guard (this torch's TensorGuards does not serve: the caller turns fast_guard off)."""
    guard, builds = cache.get(meta, (None, 0))
    if guard is not None and passes(guard):
        return guard
    if builds >= builds_max:
        return None
    guard = build()
    if guard is None:
        return False
    if len(cache) >= cache_max:
        cache.clear()
    cache[meta] = (guard, builds + 1)
    return guard
