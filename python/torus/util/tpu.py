"""TPU helpers, as Ray 2.60's ray.util.tpu: the same names, signatures, defaults, results and errors.

- Shape arithmetic: get_tpu_version_from_type, get_tpu_worker_resources, get_tpu_num_slices_for_workers,
  get_tpu_coordinator_env_vars, get_chips_per_host, get_num_chips_from_topology, infer_tpu_pod_type_from_topology,
  get_tpu_resource_per_chip (torus/_private/accelerators/tpu.py).
- The current host: get_current_pod_name, get_current_pod_worker_count, get_num_tpu_chips_on_node — from the GKE
  environment first, then (in a connected process) what the node's agent detected, then GCE metadata and device
  files (torus/_private/accelerators/tpu_host.py). A worker holding a whole host (TPU_VISIBLE_CHIPS unset) and one
  holding a chip both answer the host's chip count, as Ray's do.
- The cluster's slices: get_tpu_slice_name_from_node, get_tpu_nodes_for_slice, get_num_tpu_slices,
  get_num_ready_tpu_slices (_tpu_cluster.py), over torus.nodes() and its ray.io/ labels.
- Whole slices: SlicePlacementGroup, slice_placement_group (_tpu_slice.py), run_on_slice, dispatch,
  init_jax_profiler (_tpu_run.py); SubslicePlacementGroup, subslice_placement_group (_tpu_subslice.py).

How torus differs (it reserves slices atomically at the head, with no head placement groups) is in
_tpu_slice.py's docstring and docs/python.md.
"""

import math

from torus._private.accelerators import TPUAcceleratorManager
from torus._private.accelerators.tpu import (DEFAULT_MEGASCALE_PORT, DEFAULT_TPU_HEAD_RESERVATION_TIMEOUT_S,
                                             TPU_SUBSLICE_LABEL_PREFIX, VALID_TPU_TYPES, get_chips_per_host,
                                             get_num_chips_from_topology, get_tpu_resource_per_chip,
                                             infer_tpu_pod_type_from_topology)
from torus.util._tpu_cluster import (get_num_ready_tpu_slices, get_num_tpu_slices, get_tpu_nodes_for_slice,
                                     get_tpu_slice_name_from_node)
from torus.util._tpu_run import dispatch, init_jax_profiler, run_on_slice
from torus.util._tpu_slice import (SlicePlacementGroup, get_tpu_version_from_type, get_tpu_worker_resources,
                                   slice_placement_group)
from torus.util._tpu_subslice import SubslicePlacementGroup, subslice_placement_group
from torus.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from torus.util.scheduling_strategies import PlacementGroupSchedulingStrategy

__all__ = [
    "DEFAULT_MEGASCALE_PORT", "DEFAULT_TPU_HEAD_RESERVATION_TIMEOUT_S", "PlacementGroup",
    "PlacementGroupSchedulingStrategy", "SlicePlacementGroup", "SubslicePlacementGroup", "TPUAcceleratorManager",
    "TPU_SUBSLICE_LABEL_PREFIX", "VALID_TPU_TYPES", "dispatch", "get_chips_per_host", "get_current_pod_name",
    "get_current_pod_worker_count", "get_num_chips_from_topology", "get_num_ready_tpu_slices",
    "get_num_tpu_chips_on_node", "get_num_tpu_slices", "get_tpu_coordinator_env_vars", "get_tpu_nodes_for_slice",
    "get_tpu_num_slices_for_workers", "get_tpu_resource_per_chip", "get_tpu_slice_name_from_node",
    "get_tpu_version_from_type", "get_tpu_worker_resources", "infer_tpu_pod_type_from_topology",
    "init_jax_profiler", "placement_group", "remove_placement_group", "run_on_slice", "slice_placement_group",
    "subslice_placement_group",
]


def get_current_pod_name():
    """The name of the TPU slice this process's host belongs to, or None."""
    return TPUAcceleratorManager.get_current_node_tpu_name() or None


def get_current_pod_worker_count():
    """How many hosts this host's TPU slice has, or None off a TPU host."""
    return TPUAcceleratorManager.get_num_workers_in_current_tpu_pod()


def get_num_tpu_chips_on_node():
    """The TPU chips of this process's host (all of them, whatever part this process holds); 0 off TPUs."""
    return TPUAcceleratorManager.get_current_node_num_accelerators()


def get_tpu_num_slices_for_workers(topology, accelerator_type, num_workers, resources_per_worker=None,
                                   tpu_resource_per_chip=None):
    """Slices needed for num_workers workers of `resources_per_worker` on the shape; 1 when the inputs are empty or
    do not make sense."""
    if not topology or not accelerator_type:
        return 1
    try:
        per_slice, _ = get_tpu_worker_resources(topology=topology, accelerator_type=accelerator_type,
                                                resources_per_worker=resources_per_worker, num_slices=1,
                                                tpu_resource_per_chip=tpu_resource_per_chip)
        if per_slice == 0:
            return 1
        return max(1, math.ceil(num_workers / per_slice))
    except Exception:  # noqa: BLE001 - as Ray: any input it cannot use means one slice
        return 1


def get_tpu_coordinator_env_vars(coordinator_address, num_slices, slice_id, coordinator_port=DEFAULT_MEGASCALE_PORT):
    """The MEGASCALE_* variables of one slice of a multislice job (all strings)."""
    return {
        "MEGASCALE_COORDINATOR_ADDRESS": coordinator_address,
        "MEGASCALE_PORT": coordinator_port,
        "MEGASCALE_NUM_SLICES": str(num_slices),
        "MEGASCALE_SLICE_ID": str(slice_id),
    }
