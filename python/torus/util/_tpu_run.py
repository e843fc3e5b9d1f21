"""run_on_slice (and its deprecated name dispatch) and init_jax_profiler, as Ray 2.60's ray.util.tpu has them.

run_on_slice runs a remote function once per bundle of a SlicePlacementGroup (one made for the call, or one given),
each task pinned to its bundle with num_cpus=0 and the bundle's TPU chips; it returns the tasks' ObjectRefs.

Thread-safety: functions; run_on_slice blocks until the slice is held.
"""

import logging
import os
import warnings

from torus._private import worker as _worker
from torus._private.accelerators import tpu as _shapes
from torus.util._tpu_slice import SlicePlacementGroup
from torus.util.scheduling_strategies import PlacementGroupSchedulingStrategy

logger = logging.getLogger(__name__)

_DISPATCH_DEPRECATED = ("This API is deprecated and may be removed in future Ray releases. You could suppress this "
                        'warning by setting env variable PYTHONWARNINGS="ignore::DeprecationWarning"\n'
                        "'dispatch' is deprecated and has been renamed to 'run_on_slice'. Please use 'run_on_slice' "
                        "instead.")


def run_on_slice(fn, *args, topology=None, accelerator_version=None, tpu_slice=None, slice_index=None, num_slices=1,
                 chips_per_vm=None, head_reservation_timeout_s=_shapes.DEFAULT_TPU_HEAD_RESERVATION_TIMEOUT_S,
                 pg_ready_timeout_s=None, **kwargs):
    """One task of `fn` (a remote function) per host bundle of a slice, with `args` and `kwargs`; returns their
    ObjectRefs once the slice is held. Without `tpu_slice`, reserves one of `topology` and `accelerator_version`
    (it stays held until removed or this program ends); `slice_index` picks one slice of a pg_per_slice handle."""
    if not hasattr(fn, "options"):
        raise TypeError(f"fn must be a @ray.remote-decorated function, but got {type(fn).__name__!r} which has no "
                        ".options() method.")
    owns_slice = tpu_slice is None
    handle = tpu_slice
    if slice_index is not None:
        if owns_slice:
            raise ValueError("slice_index can only be used when an existing tpu_slice is provided.")
        if not handle._pg_per_slice:
            raise ValueError("slice_index can only be used when tpu_slice was created with pg_per_slice=True.")
        if slice_index < 0 or slice_index >= handle.num_slices:
            raise ValueError(f"Invalid slice_index {slice_index}. Must be between 0 and {handle.num_slices - 1}.")
    if owns_slice:
        if topology is None or accelerator_version is None:
            raise ValueError("topology and accelerator_version are required when tpu_slice is not provided.")
        handle = SlicePlacementGroup(topology=topology, accelerator_version=accelerator_version, num_slices=num_slices,
                                     chips_per_vm=chips_per_vm, head_reservation_timeout_s=head_reservation_timeout_s)
    groups = handle.slice_placement_groups if handle._pg_per_slice else [handle.slice_placement_group]
    if not groups or any(pg is None for pg in groups):
        raise ValueError("The provided tpu_slice has already been shut down. Create a new SlicePlacementGroup or pass "
                         "tpu_slice=None to reserve one automatically.")
    if slice_index is not None:
        groups = [groups[slice_index]]
    tpus = handle.bundle_resources.get("TPU", handle.devices_per_host)
    ready, _ = _worker.wait([pg.ready() for pg in groups], num_returns=len(groups), timeout=pg_ready_timeout_s)
    if len(ready) != len(groups):
        if owns_slice:
            handle.shutdown()
        raise TimeoutError(f"TPU slice placement group was not ready within {pg_ready_timeout_s}s. Ensure your "
                           "cluster has sufficient TPU resources available.")
    try:
        _worker.get(ready)
    except Exception:
        if owns_slice:
            handle.shutdown()
        raise
    if owns_slice:
        handle.release_head_pgs()
    per_group = handle.num_bundles // handle.num_slices if handle._pg_per_slice else handle.num_bundles
    refs = []
    for pg in groups:
        for i in range(per_group):
            strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)
            refs.append(fn.options(num_cpus=0, resources={"TPU": tpus}, scheduling_strategy=strategy)
                        .remote(*args, **kwargs))
    return refs


def dispatch(*args, **kwargs):
    """Deprecated name of run_on_slice (warns with a DeprecationWarning)."""
    warnings.warn(_DISPATCH_DEPRECATED, DeprecationWarning, stacklevel=2)
    return run_on_slice(*args, **kwargs)


def init_jax_profiler(port=None):
    """Starts JAX's profiler server in this process on `port` (default JAX_PROFILER_PORT, else 9999). Errors are
    logged, never raised, as Ray's. torus's dashboard does not list profiler ports: connect to the worker's host and
    port yourself."""
    try:
        import jax
    except ImportError:
        logger.warning("JAX is not installed, skipping JAX profiler setup")
        return
    try:
        if port is None:
            port = int(os.getenv("JAX_PROFILER_PORT", "9999"))
        jax.profiler.start_server(port)
        logger.info(f"Started JAX profiler server on port {port}")
    except Exception as e:  # noqa: BLE001 - as Ray: the program goes on without a profiler
        logger.error(f"Failed to start JAX profiler server on port {port}: {e}")
