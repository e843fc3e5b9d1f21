"""Results as they finish (as ray.util.helpers): as_completed over refs, map_unordered of a remote function over
items with a cap on the tasks in flight.

    for value in as_completed(refs, chunk_size=2):       # batches of up to 2 ready results, in ray.wait's order
        ...
    for value in map_unordered(f, range(1000), backpressure_size=50):
        ...

Both use ray.wait(num_returns=chunk_size) and then get; **kwargs go to wait (timeout, fetch_local).
"""

from typing import Any, Iterable, Iterator, Optional, Sequence

DEFAULT_CHUNK_SIZE = 10
DEFAULT_BACKPRESSURE_SIZE = 100


def _next_batch(refs, chunk_size, yield_obj_refs, wait_kwargs):
    """(values or refs of up to `chunk_size` ready refs, the refs still pending)."""
    from torus._private import worker
    if chunk_size < 1:
        raise ValueError("`chunk_size` must be >= 1")
    ready, pending = worker.wait(list(refs), num_returns=min(chunk_size, len(refs)), **wait_kwargs)
    return (ready if yield_obj_refs else worker.get(ready)), pending


def as_completed(refs: "Sequence[Any]", *, chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False,
                 **kwargs) -> Iterator[Any]:
    """Yields the results of `refs` (or the refs themselves with yield_obj_refs) as batches of them become ready."""
    if chunk_size < 1:
        raise ValueError("`chunk_size` must be >= 1")
    if "num_returns" in kwargs:
        raise ValueError("Use the `chunksize` argument instead of `num_returns`.")
    while refs:
        batch, refs = _next_batch(refs, chunk_size, yield_obj_refs, kwargs)
        yield from batch


def map_unordered(fn: Any, items: Iterable[Any], *, backpressure_size: Optional[int] = DEFAULT_BACKPRESSURE_SIZE,
                  chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False, **kwargs) -> Iterator[Any]:
    """Yields fn.remote(item)'s results as they finish; once `backpressure_size` tasks are in flight, waits for a
    batch of `chunk_size` before submitting more (None: no cap)."""
    if backpressure_size is None:
        backpressure_size = float("inf")
    elif backpressure_size <= 0:
        raise ValueError("backpressure_size must be positive.")
    if chunk_size < 1:
        raise ValueError("`chunk_size` must be >= 1")
    if "num_returns" in kwargs:
        raise ValueError("Use the `chunk_size` argument instead of `num_returns`.")
    in_flight = []
    for item in items:
        in_flight.append(fn.remote(item))
        if len(in_flight) >= backpressure_size:
            batch, in_flight = _next_batch(in_flight, chunk_size, yield_obj_refs, kwargs)
            yield from batch
    yield from as_completed(in_flight, chunk_size=chunk_size, yield_obj_refs=yield_obj_refs, **kwargs)
