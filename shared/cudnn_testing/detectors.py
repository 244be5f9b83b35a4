"""Contract detectors (recipe R9). Each was seen failing against a planted violation before being trusted
(packages/cudnn-core/tests/test_detectors_planted.py plants one violation per detector)."""

from __future__ import annotations

import contextlib

_EXPLICIT_SYNCS = (
    ("torch.cuda", "synchronize"),
    ("torch.cuda.Stream", "synchronize"),
    ("torch.cuda.Event", "synchronize"),
    ("cuda.bindings.driver", "cuStreamSynchronize"),
    ("cuda.bindings.driver", "cuCtxSynchronize"),
    ("cuda.bindings.driver", "cuEventSynchronize"),
    ("cuda.bindings.runtime", "cudaDeviceSynchronize"),
    ("cuda.bindings.runtime", "cudaStreamSynchronize"),
)


def _resolve_owner(path: str):
    import importlib

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None


@contextlib.contextmanager
def no_sync():
    """Any blocking device-to-host read (torch sync debug mode "error") or explicit synchronize
    (torch.cuda / stream / event synchronize, the driver's and runtime's *Synchronize) inside raises.
    Sync debug mode alone does not flag an explicit ``torch.cuda.synchronize()``."""
    import torch

    patched = []
    for owner_path, name in _EXPLICIT_SYNCS:
        owner = _resolve_owner(owner_path)
        original = getattr(owner, name, None) if owner is not None else None
        if original is None:
            continue

        def _forbidden(*args, _what=f"{owner_path}.{name}", **kwargs):
            raise RuntimeError(f"{_what}() called inside a no-sync region: execute/build must never block the host (Rules 3 and 8)")

        try:
            setattr(owner, name, _forbidden)
        except (AttributeError, TypeError):
            continue
        patched.append((owner, name, original))
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


@contextlib.contextmanager
def no_allocation(device=None):
    """The caching allocator's allocation count does not move inside."""
    import torch

    before = torch.cuda.memory_stats(device).get("allocation.all.allocated", 0)
    yield
    after = torch.cuda.memory_stats(device).get("allocation.all.allocated", 0)
    if after != before:
        raise AssertionError(f"execute allocated device memory: allocation.all.allocated went {before} -> {after}")


def assert_no_sync_no_alloc(fn, repeats: int = 3) -> None:
    """Run warm ``fn`` ``repeats`` times under both detectors (the callable must be warmed up before)."""
    with no_allocation(), no_sync():
        for _ in range(repeats):
            fn()


def assert_capture_matches_eager(run, outputs, clone_outputs=True, atol=0.0) -> None:
    """``run()`` first executes INSIDE a CUDA graph capture (lazy build under capture), then replays and
    must reproduce the eager result of a second ``run()`` bit for bit (or within ``atol``)."""
    import torch

    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            run()
    graph.replay()
    torch.cuda.synchronize()
    captured = [o.clone() for o in outputs]
    for o in outputs:
        o.fill_(float("nan")) if o.dtype.is_floating_point else o.zero_()
    run()
    torch.cuda.synchronize()
    for i, (c, e) in enumerate(zip(captured, outputs, strict=False)):
        if not torch.allclose(c.float(), e.float(), atol=atol, rtol=0, equal_nan=False):
            raise AssertionError(f"output {i}: CUDA-graph replay differs from eager by {(c.float() - e.float()).abs().max().item():.3e}")


@contextlib.contextmanager
def external_stream_forbidden(monkeypatch):
    """torch.cuda.ExternalStream raises inside: a default-stream handle must never reach it (recipe R1)."""
    import torch

    def _raise(*args, **kwargs):
        raise AssertionError(f"torch.cuda.ExternalStream{args} called: default-stream handles must map to torch.cuda.default_stream")

    monkeypatch.setattr(torch.cuda, "ExternalStream", _raise)
    yield


def run_on_side_stream_with_sentinel(launch, inputs_producer):
    """Stream-order detector: ``inputs_producer()`` enqueues slow work on a side stream that writes the
    inputs; ``launch(stream)`` must run on that same stream so it sees the final values."""
    import torch

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of spin so a mis-ordered launch reads stale inputs
        inputs_producer()
        result = launch(side)
    side.synchronize()
    return result
