"""TPU shape arithmetic, as Ray 2.60's ray._private.accelerators.tpu computes it (reference/tpu.md §1-2,
reference/ray_tpu_facts.md §1.3-1.5): generations, valid topologies, chips, cores and hosts of a shape, pod types,
and the worker grid of a slice that subslices are cut from.

Every function here is pure (the environment is read only by get_tpu_resource_per_chip) and answers exactly as
Ray's does, errors included, so that ray.util.tpu's helpers give the same numbers under torus.

    get_num_chips_from_topology("4x4")               -> 16
    get_chips_per_host("4x4", "v6e")                 -> 4   (multi-host v5e/v6e hosts have 4 chips)
    get_chips_per_host("2x4", "v6e")                 -> 8   (one 8-chip host)
    infer_tpu_pod_type_from_topology("2x2x2", "TPU-V4") -> "v4-16"   (v4 counts TensorCores, 2 per chip)
"""

import os
import re
from functools import lru_cache

TPU_VALID_CHIP_OPTIONS = (1, 2, 4, 8)
DEFAULT_TPU_NUM_CHIPS_PER_HOST = 4
DEFAULT_TPU_NUM_CORES_PER_CHIP = 2
# The multislice coordinator's default port (MEGASCALE_PORT).
DEFAULT_MEGASCALE_PORT = "8081"
# How long SlicePlacementGroup waits for each slice by default.
DEFAULT_TPU_HEAD_RESERVATION_TIMEOUT_S: float = 100.0

# Generations whose single-host shapes have up to 8 chips on one host; and whose pod type counts chips, not cores.
TPU_8_CHIPS_PER_HOST_TYPES = ("v5litepod", "v6e")
SINGLE_CORE_TPU_TYPES = ("v5litepod", "v6e")
# Shapes that are always one host (or less) on those generations.
TPU_SINGLE_HOST_TOPOLOGIES = ("1x1", "2x2", "2x4")
VALID_TPU_TYPES = ("v2", "v3", "v4", "v5p", "v5litepod", "v6e", "v7x")

RAY_TPU_RESOURCE_PER_CHIP_ENV_VAR = "RAY_TPU_RESOURCE_PER_CHIP"
TPU_SUBSLICE_LABEL_PREFIX = "ray.io/tpu-subslice-"


def _cubes_of_four(max_x, max_y, max_z):
    """Every AxBxC whose dims are multiples of 4 up to the given maxima (the large v4/v5p shapes)."""
    step = DEFAULT_TPU_NUM_CHIPS_PER_HOST
    return {f"{x}x{y}x{z}" for x in range(step, max_x + 1, step) for y in range(step, max_y + 1, step)
            for z in range(step, max_z + 1, step)}


_SMALL_3D = {"2x2x1", "2x2x2", "2x2x4", "2x4x4"}
_2D_V5E_V6E = {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"}

VALID_TPU_TOPOLOGY = {
    "v2": {"4x4", "4x8", "8x8", "8x16", "16x16"},
    "v3": {"4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"},
    "v4": _SMALL_3D | _cubes_of_four(12, 12, 16),
    "v5p": _SMALL_3D | _cubes_of_four(16, 16, 24),
    "v5litepod": set(_2D_V5E_V6E),
    "v6e": set(_2D_V5E_V6E),
    "v7x": _SMALL_3D | {"4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16"},
}

# Hosts along each axis of a slice of 4-chip hosts: (y, x) for 2D shapes, (z, y, x) for 3D ones, in ascending order
# of host count (subslice labelling relies on that order).
_VALID_TOPOLOGY_WORKER_DIMS_2D = {
    "2x2": (1, 1), "2x4": (1, 2), "4x4": (2, 2), "4x8": (2, 4), "8x8": (4, 4), "8x16": (4, 8), "16x16": (8, 8),
}
_VALID_TOPOLOGY_WORKER_DIMS_3D = {
    "2x2x1": (1, 1, 1), "2x2x2": (1, 1, 2), "2x2x4": (1, 1, 4), "2x4x4": (1, 2, 4), "4x4x4": (2, 2, 4),
    "4x4x8": (2, 2, 8), "4x8x8": (2, 4, 8), "8x8x8": (4, 4, 8), "8x8x16": (4, 4, 16), "8x16x16": (4, 8, 16),
    "16x16x16": (8, 8, 16), "16x16x24": (8, 8, 24),
}


def _parse_topology_dims(topology):
    """"2x4" -> (2, 4); "2x2x2" -> (2, 2, 2). ValueError for a part that is not a number."""
    return tuple(int(part) for part in topology.strip().lower().split("x"))


@lru_cache(maxsize=None)
def _get_worker_dims_for_topology(topology):
    """The host grid of a shape, (y, x) or (z, y, x); ValueError for a shape subslicing does not know."""
    table = _VALID_TOPOLOGY_WORKER_DIMS_2D if len(_parse_topology_dims(topology)) == 2 else \
        _VALID_TOPOLOGY_WORKER_DIMS_3D
    if topology not in table:
        kind = "2D" if table is _VALID_TOPOLOGY_WORKER_DIMS_2D else "3D"
        raise ValueError(f"Unknown {kind} topology: '{topology}'. Valid: {list(table.keys())}")
    return table[topology]


def get_num_chips_from_topology(topology):
    """Chips of a shape: the product of its dims ("2x2x2" -> 8)."""
    chips = 1
    for dim in _parse_topology_dims(topology):
        chips *= dim
    return chips


def _accelerator_type_check(accelerator_type):
    if not accelerator_type.startswith(VALID_TPU_TYPES):
        raise ValueError(f"Invalid accelerator type: {accelerator_type}. Must start with one of: {VALID_TPU_TYPES}")


def get_tpu_cores_per_chip(accelerator_type):
    """TensorCores per chip of a generation or pod type ("v6e" -> 1, "v4-16" -> 2)."""
    _accelerator_type_check(accelerator_type)
    return 1 if accelerator_type.startswith(SINGLE_CORE_TPU_TYPES) else DEFAULT_TPU_NUM_CORES_PER_CHIP


def get_total_chips_from_accelerator_type(accelerator_type):
    """Chips of a pod type ("v6e-16" -> 16, "v4-16" -> 8)."""
    _accelerator_type_check(accelerator_type)
    parts = accelerator_type.split("-")
    if len(parts) < 2:
        raise ValueError(f"Accelerator type must include size (e.g. 'v6e-8'), got: {accelerator_type}")
    return int(parts[1]) // get_tpu_cores_per_chip(accelerator_type)


def get_num_tpu_visible_chips_per_host(accelerator_type):
    """Chips on each host of a pod type: all of them for a v5e/v6e shape of at most 8 chips, else 4."""
    _accelerator_type_check(accelerator_type)
    if accelerator_type.startswith(TPU_8_CHIPS_PER_HOST_TYPES):
        chips = get_total_chips_from_accelerator_type(accelerator_type)
        if chips <= 8:
            return chips
    return DEFAULT_TPU_NUM_CHIPS_PER_HOST


def get_chips_per_host(topology, accelerator_version):
    """Default chips per host of a shape: every chip for v5e/v6e 1x1, 2x2 and 2x4 (one host), else 4."""
    chips = get_num_chips_from_topology(topology)  # first: a topology that does not parse fails here
    if (accelerator_version.strip().lower() in TPU_8_CHIPS_PER_HOST_TYPES
            and topology.strip().lower() in TPU_SINGLE_HOST_TOPOLOGIES):
        return chips
    return DEFAULT_TPU_NUM_CHIPS_PER_HOST


def _get_default_chips_per_vm(topology, accelerator_version):
    """Chips per VM of a subslice's parent: v5e/v6e shapes of at most 8 chips are one VM, else 4 chips a VM."""
    if accelerator_version.strip().lower() in TPU_8_CHIPS_PER_HOST_TYPES:
        chips = get_num_chips_from_topology(topology)
        if chips <= 8:
            return chips
    return DEFAULT_TPU_NUM_CHIPS_PER_HOST


def infer_tpu_pod_type_from_topology(topology, accelerator_type):
    """The pod type of a shape ("4x4", "TPU-V6E" -> "v6e-16"); None when either is empty."""
    if not topology or not accelerator_type:
        return None
    try:
        generation = accelerator_type.lower().replace("tpu-", "")
        cores = get_num_chips_from_topology(topology) * get_tpu_cores_per_chip(generation)
        return f"{generation}-{cores}"
    except Exception as e:
        raise ValueError(f"Failed to infer pod type from topology '{topology}' and type '{accelerator_type}'") from e


def normalize_tpu_accelerator_type(accelerator_type):
    """The canonical "v<gen>" spelling of a generation prefix: "TPU-V7X" -> "v7x", "tpu7x-8" -> "v7x-8"; "" for
    None or empty."""
    if not accelerator_type:
        return ""
    return re.sub(r"^tpu-?v?", "v", accelerator_type.strip().lower())


def is_valid_tpu_accelerator_type(tpu_accelerator_type):
    """A pod type's form: v<gen>-<n> or tpu<gen>-<n> ("v6e-16", "v5litepod-8", "tpu7x-8")."""
    return re.match(r"^(v|tpu)\d+[a-zA-Z]*-\d+$", tpu_accelerator_type) is not None


def is_valid_tpu_accelerator_topology(tpu_accelerator_version, tpu_topology):
    """Whether a generation ("v6e", "TPU-V6E", "V5P") has a shape ("4x4")."""
    version = normalize_tpu_accelerator_type(tpu_accelerator_version).split("-")[0]
    return version in VALID_TPU_TOPOLOGY and tpu_topology.strip().lower() in VALID_TPU_TOPOLOGY[version]


def get_tpu_resource_per_chip():
    """Logical TPU resources per chip: RAY_TPU_RESOURCE_PER_CHIP (a positive integer), default 1."""
    value = os.environ.get(RAY_TPU_RESOURCE_PER_CHIP_ENV_VAR)
    if value is None:
        return 1
    if not value.isdecimal() or int(value) < 1:
        raise ValueError(f"{RAY_TPU_RESOURCE_PER_CHIP_ENV_VAR} must be a positive integer, got: {value!r}")
    return int(value)


def _get_physical_worker_id_from_coords(coords_list, parent_topology):
    """The mesh position (0-based, row-major over the host grid) of the host whose chips have these libtpu
    coordinates ([x, y] or [x, y, z] each) in a slice of `parent_topology`: its lowest chip coordinate divided by
    the block of chips one host covers."""
    if not coords_list:
        raise ValueError("coords_list cannot be empty")
    worker_dims = _get_worker_dims_for_topology(parent_topology)
    chip_dims = _parse_topology_dims(parent_topology)
    min_x = min(c[0] for c in coords_list)
    min_y = min(c[1] for c in coords_list)
    if len(worker_dims) == 2:
        hosts_y, hosts_x = worker_dims
        wx = min_x // max(1, chip_dims[1] // hosts_x)
        wy = min_y // max(1, chip_dims[0] // hosts_y)
        if wx >= hosts_x or wy >= hosts_y:
            raise ValueError(f"Computed worker position ({wx}, {wy}) is out of bounds for parent topology "
                             f"'{parent_topology}' with worker dims ({hosts_y}, {hosts_x}).")
        return wy * hosts_x + wx
    hosts_z, hosts_y, hosts_x = worker_dims
    wx = min_x // max(1, chip_dims[2] // hosts_x)
    wy = min_y // max(1, chip_dims[1] // hosts_y)
    if any(len(c) >= 3 for c in coords_list):
        wz = min(c[2] if len(c) >= 3 else 0 for c in coords_list) // max(1, chip_dims[0] // hosts_z)
    else:
        wz = 0
    if wx >= hosts_x or wy >= hosts_y or wz >= hosts_z:
        raise ValueError(f"Computed worker position ({wx}, {wy}, {wz}) is out of bounds for parent topology "
                         f"'{parent_topology}' with worker dims ({hosts_z}, {hosts_y}, {hosts_x}).")
    return wz * hosts_y * hosts_x + wy * hosts_x + wx


def _build_subslice_labels(physical_worker_id, parent_topology):
    """{"ray.io/tpu-subslice-<shape>": "<index>"} for every smaller shape that tiles the parent's host grid: which
    tile of that shape holds the host at `physical_worker_id`."""
    worker_dims = _get_worker_dims_for_topology(parent_topology)
    table = _VALID_TOPOLOGY_WORKER_DIMS_2D if len(worker_dims) == 2 else _VALID_TOPOLOGY_WORKER_DIMS_3D
    # The host's position along each axis, outermost first.
    position = []
    rest = physical_worker_id
    for size in reversed(worker_dims):
        position.append(rest % size)
        rest //= size
    position.reverse()
    labels = {}
    for shape, tile in table.items():
        if any(t > d for t, d in zip(tile, worker_dims)):
            continue
        if shape == parent_topology:
            break  # the table ascends: nothing after the parent is smaller
        index = 0
        for p, t, d in zip(position, tile, worker_dims):
            index = index * (d // t) + p // t
        labels[f"{TPU_SUBSLICE_LABEL_PREFIX}{shape}"] = str(index)
    return labels
