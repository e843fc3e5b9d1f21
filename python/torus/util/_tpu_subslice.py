"""subslice_placement_group and SubslicePlacementGroup (as Ray 2.60's ray.util.tpu): a contiguous block of hosts of a
larger TPU slice (a 2x4 of a 4x4), so that several jobs share one physical slice along ICI-connected tiles.

As Ray does: the first request for a parent shape reserves an idle parent slice whole, asks libtpu on each of its
hosts for its chips' coordinates (libtpu.sdk.slice.get_chip_coordinates(); a host without libtpu fails the call
with RuntimeError), computes which tile of each smaller shape every TPU worker id lies in, releases the slice, and
then places a STRICT_SPREAD placement group on the tile's hosts by {"ray.io/tpu-slice-name",
"ray.io/tpu-worker-id"} selectors. Differences: the discovered layout is kept in this process only (Ray also keeps
it in the GCS's internal KV for every driver of the cluster), and there are no head placement groups.

Thread-safety: the layout cache is guarded by a lock; calls block while a slice is discovered.
"""

import logging
import math
import threading
import time

from torus._private import worker as _worker
from torus._private.make_remote import remote
from torus._private.accelerators import tpu as _shapes
from torus._private.accelerators.tpu_host import SLICE_NAME_LABEL, TOPOLOGY_LABEL, WORKER_ID_LABEL
from torus.util._tpu_cluster import available_resources_per_node, tpu_idle
from torus.util._tpu_slice import SlicePlacementGroup, get_tpu_version_from_type
from torus.util.placement_group import placement_group, remove_placement_group
from torus.util.scheduling_strategies import PlacementGroupSchedulingStrategy

logger = logging.getLogger(__name__)

_cache_lock = threading.RLock()
_layouts = {}  # slice name -> {worker id label: {"ray.io/tpu-subslice-<shape>": index}}


class SubslicePlacementGroup:
    """A placement group holding a tile of hosts of a TPU slice, with what Ray's handle says about it."""

    def __init__(self, placement_group, parent_topology, subslice_topology, subslice_index, slice_name, num_hosts,
                 chips_per_host, bundle_resources, head_placement_groups=None, bundle_label_selectors=None):
        self._placement_group = placement_group
        self._parent_topology = parent_topology
        self._subslice_topology = subslice_topology
        self._subslice_index = subslice_index
        self._slice_name = slice_name
        self._num_hosts = num_hosts
        self._chips_per_host = chips_per_host
        self._bundle_resources = bundle_resources
        self._head_placement_groups = head_placement_groups or []
        self._bundle_label_selectors = bundle_label_selectors or []

    placement_group = property(lambda self: self._placement_group)
    parent_topology = property(lambda self: self._parent_topology)
    subslice_topology = property(lambda self: self._subslice_topology)
    subslice_index = property(lambda self: self._subslice_index)
    slice_name = property(lambda self: self._slice_name)
    num_hosts = property(lambda self: self._num_hosts)
    chips_per_host = property(lambda self: self._chips_per_host)
    bundle_resources = property(lambda self: self._bundle_resources)
    head_placement_groups = property(lambda self: self._head_placement_groups)
    bundle_label_selector = property(lambda self: self._bundle_label_selectors)

    def release_head_pgs(self):
        """Removes the head groups it was given (torus makes none); idempotent."""
        heads, self._head_placement_groups = self._head_placement_groups, []
        for pg in heads:
            try:
                remove_placement_group(pg)
            except Exception:  # noqa: BLE001 - logged as Ray's
                logger.exception("Failed to remove TPU head PG %s", getattr(pg, "id", pg))

    def shutdown(self):
        """Removes the placement group (idempotent)."""
        if self._placement_group is not None:
            try:
                remove_placement_group(self._placement_group)
            except Exception:  # noqa: BLE001 - logged as Ray's
                logger.exception("Failed to remove subslice placement group %s",
                                 getattr(self._placement_group, "id", self._placement_group))
            self._placement_group = None
        self.release_head_pgs()


def _labels(node):
    return node.get("Labels", {})


def _parent_topologies(subslice_topology, nodes):
    """Shapes of alive slices whose host grid contains the subslice's in every axis, smallest first."""
    sub = _shapes._get_worker_dims_for_topology(subslice_topology)
    found = []
    for topology in {_labels(n).get(TOPOLOGY_LABEL) for n in nodes if n.get("Alive")} - {None, subslice_topology}:
        try:
            dims = _shapes._get_worker_dims_for_topology(topology)
        except ValueError:
            continue
        if len(dims) == len(sub) and all(p >= s for p, s in zip(dims, sub)):
            found.append((math.prod(dims), topology))
    return [t for _, t in sorted(found)]


def _validate(subslice_topology, accelerator_version, chips_per_vm):
    version = get_tpu_version_from_type(accelerator_version)
    subslice_topology = subslice_topology.strip().lower()
    invalid = ValueError(f"Subslice topology '{subslice_topology}' is not valid for accelerator version '{version}'.")
    try:
        _shapes._parse_topology_dims(subslice_topology)
    except ValueError:
        raise invalid from None
    if not _shapes.is_valid_tpu_accelerator_topology(version, subslice_topology):
        raise invalid
    if chips_per_vm is not None and chips_per_vm <= 0:
        raise ValueError("chips_per_vm must be positive.")
    nodes = _worker.nodes()
    parents = _parent_topologies(subslice_topology, nodes)
    if not parents:
        present = sorted({_labels(n).get(TOPOLOGY_LABEL) for n in nodes if n.get("Alive")} - {None})
        message = (f"No topology in the cluster can serve as a parent for subslice '{subslice_topology}'. Alive TPU "
                   f"topologies found: {present or ['(none)']}")
        if subslice_topology in present:
            message += "  Use slice_placement_group() instead."
        raise ValueError(message)
    return version, subslice_topology, parents


def _slices_of(topology, nodes):
    """{slice name: {worker id label: node}} of the alive slices of a shape."""
    out = {}
    for n in nodes:
        labels = _labels(n)
        if n.get("Alive") and labels.get(TOPOLOGY_LABEL) == topology and labels.get(SLICE_NAME_LABEL):
            out.setdefault(labels[SLICE_NAME_LABEL], {})[labels.get(WORKER_ID_LABEL)] = n
    return out


def _free_tile(slice_name, subslice_topology, workers, available, wanted_index):
    """(worker ids ascending, tile index) of the first tile of the subslice shape whose hosts are all alive and
    idle, or None."""
    with _cache_lock:
        layout = dict(_layouts.get(slice_name, {}))
    key = f"{_shapes.TPU_SUBSLICE_LABEL_PREFIX}{subslice_topology}"
    tiles = {}
    for worker_id, labels in layout.items():
        if key in labels and (wanted_index is None or int(labels[key]) == wanted_index):
            tiles.setdefault(int(labels[key]), []).append(worker_id)
    hosts = math.prod(_shapes._get_worker_dims_for_topology(subslice_topology))
    for index in sorted(tiles):
        ids = tiles[index]
        if len(ids) != hosts:
            logger.warning("Subslice %s of '%s' in '%s' has %d workers but %d are expected; skipping.", index,
                           subslice_topology, slice_name, len(ids), hosts)
            continue
        if all(w in workers and workers[w].get("Alive") and tpu_idle(workers[w], available) for w in ids):
            return sorted(ids, key=int), index
    return None


def _discover_tpu_node_coords():
    """In a task on a TPU host: this node's id and its chips' libtpu coordinates."""
    import torus
    node_id = torus.get_runtime_context().get_node_id()
    try:
        from libtpu import sdk
    except ImportError:
        raise RuntimeError("libtpu is required for TPU subslice discovery. Install libtpu on all TPU worker "
                           "nodes.") from None
    return {"node_id": node_id, "coords": [(c.hostname(), c.chip_index(), list(c.coordinates()))
                                           for c in sdk.slice.get_chip_coordinates()]}


def _discover(parent_topology, version, chips_per_vm, slice_name, timeout_s):
    """Reserves the idle slice whole, reads each host's chip coordinates and records the slice's tiles."""
    logger.info("Running TPU subslice topology discovery for %s (%s)...", parent_topology, version)
    full = None
    try:
        hosts = _shapes.get_num_chips_from_topology(parent_topology) // chips_per_vm or 1
        full = SlicePlacementGroup(topology=parent_topology, accelerator_version=version, chips_per_vm=chips_per_vm,
                                   head_reservation_timeout_s=timeout_s,
                                   bundle_label_selector=[{SLICE_NAME_LABEL: slice_name}] * hosts)
        _worker.get(full.placement_group.ready(), timeout=timeout_s)
        task = remote(_discover_tpu_node_coords)
        results = _worker.get([task.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=full.placement_group, placement_group_bundle_index=i)).remote()
            for i in range(full.num_bundles)])
        by_node = {n["NodeID"]: n for n in _worker.nodes()}
        layout = {}
        for result in results:
            worker_id = _labels(by_node.get(result["node_id"], {})).get(WORKER_ID_LABEL)
            if worker_id is None or not result.get("coords"):
                continue
            position = _shapes._get_physical_worker_id_from_coords([c[2] for c in result["coords"]], parent_topology)
            layout[worker_id] = _shapes._build_subslice_labels(position, parent_topology)
        if len(layout) < full.num_bundles:
            raise RuntimeError(f"Subslice discovery for '{slice_name}' is incomplete: labeled {len(layout)} of "
                               f"{full.num_bundles} expected workers. Workers may be missing 'tpu-worker-id' labels "
                               "or failed to return chip coordinates.")
        with _cache_lock:
            _layouts[slice_name] = layout
    finally:
        if full is not None:
            full.shutdown()
    # Removal is asynchronous: wait until the slice's chips read free again, so the caller finds its tiles idle.
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        available = available_resources_per_node()
        nodes = _slices_of(parent_topology, _worker.nodes()).get(slice_name, {}).values()
        if all(tpu_idle(n, available) for n in nodes) or (deadline is not None and time.monotonic() >= deadline):
            return
        time.sleep(0.2)


def subslice_placement_group(subslice_topology, accelerator_version, chips_per_vm=None, resources_per_bundle=None,
                             strategy="STRICT_SPREAD", name="", lifetime=None,
                             head_reservation_timeout_s=_shapes.DEFAULT_TPU_HEAD_RESERVATION_TIMEOUT_S,
                             subslice_index=None):
    """A placement group on an idle tile of `subslice_topology` hosts of a larger slice in the cluster (the tile
    numbered `subslice_index` when given), one bundle per host ({"CPU": 1, "TPU": chips per VM} by default)."""
    version, subslice_topology, parents = _validate(subslice_topology, accelerator_version, chips_per_vm)
    while True:
        nodes = _worker.nodes()
        available = available_resources_per_node()
        undiscovered = None
        for parent in parents:
            for slice_name, workers in sorted(_slices_of(parent, nodes).items()):
                with _cache_lock:
                    known = slice_name in _layouts
                if known:
                    tile = _free_tile(slice_name, subslice_topology, workers, available, subslice_index)
                    if tile is not None:
                        per_vm = chips_per_vm or _shapes._get_default_chips_per_vm(parent, version)
                        return _place(tile, slice_name, subslice_topology, parent, per_vm, resources_per_bundle,
                                      strategy, name, lifetime)
                elif undiscovered is None and all(tpu_idle(n, available) for n in workers.values()):
                    undiscovered = (parent, slice_name)
        if undiscovered is None:
            raise RuntimeError(f"No subslice of '{subslice_topology}' is schedulable across any of the candidate "
                               f"parent topologies: {parents}.")
        parent, slice_name = undiscovered
        _discover(parent, version, chips_per_vm or _shapes._get_default_chips_per_vm(parent, version), slice_name,
                  head_reservation_timeout_s)


def _place(tile, slice_name, subslice_topology, parent, chips_per_vm, resources_per_bundle, strategy, name, lifetime):
    worker_ids, index = tile
    resources = resources_per_bundle if resources_per_bundle is not None else {"CPU": 1, "TPU": chips_per_vm}
    selectors = [{SLICE_NAME_LABEL: slice_name, WORKER_ID_LABEL: w} for w in worker_ids]
    pg = placement_group(bundles=[dict(resources) for _ in worker_ids], strategy=strategy, name=name,
                         lifetime=lifetime, bundle_label_selector=selectors)
    return SubslicePlacementGroup(placement_group=pg, parent_topology=parent, subslice_topology=subslice_topology,
                                  subslice_index=index, slice_name=slice_name, num_hosts=len(worker_ids),
                                  chips_per_host=chips_per_vm, bundle_resources=resources,
                                  bundle_label_selectors=selectors)
