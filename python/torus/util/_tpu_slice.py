"""SlicePlacementGroup and slice_placement_group (as Ray 2.60's ray.util.tpu): whole TPU slices reserved for a
program, with Ray's constructor, properties, bundle arithmetic, validation and errors.

Ray reserves a multi-host slice in two steps (a placement group on the slice's worker 0 holding its
"TPU-<pod type>-head" resource, then a placement group of the slice's bundles selected by its slice name). torus
reserves whole slices atomically at the head instead (a slice group, `state.core.reserve_slices`): num_slices
distinct complete slices of the shape, all-or-nothing, with one bundle per host ordered by TPU worker id (or one
per aligned chip block). So:

- `placement_group` is that slice group (a PlacementGroup: ready(), wait(), PlacementGroupSchedulingStrategy);
  with pg_per_slice=True, `slice_placement_groups` holds one slice group per slice.
- As Ray's, the constructor returns once a multi-host group holds its slices (waiting up to
  head_reservation_timeout_s, then TimeoutError); `bundle_label_selector` then names each bundle's slice
  ({"ray.io/tpu-slice-name": ...} over the user's selector), as Ray's does. Single-host shapes return at once.
- There are no head placement groups: `head_placement_groups` is [] and `release_head_pgs()` only checks its
  argument as Ray's does (its slice indices are those Ray would have made head groups for).
- What a slice group cannot express raises ValueError naming it, where Ray would make a placement group that is
  never ready: a TPU amount per bundle above the chips per host, STRICT_PACK over several hosts, STRICT_SPREAD with
  several bundles per host, tpu_resource_per_chip other than 1 (torus counts TPU in whole chips), or per-bundle
  label selectors that differ within one group (one selector holds for every host of a slice group).
- lifetime=None: a driver's groups are removed when it exits (Ray: when its job ends), as placement_group's are;
  "detached" ones, and those a task or actor makes, stay until removed.
"""

import atexit
import logging
import threading
import time

from torus._private import worker as _worker
from torus._private.accelerators import tpu as _shapes
from torus._private.accelerators.tpu_host import SLICE_NAME_LABEL
from torus.util.placement_group import PlacementGroup, _fixed, remove_placement_group

logger = logging.getLogger(__name__)

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
# torus's node label of a TPU host's chip count (not aliased by ray.io/).
_CHIPS_PER_HOST_LABEL = "torus.io/tpu-chips-per-host"
# The head answers a waiting read after at most this long; longer waits ask again.
_MAX_WAIT_MS = 3_600_000

_owned_lock = threading.Lock()
_owned = set()  # ids of groups of lifetime None this process made and has not removed


def _remove_owned_at_exit():
    from torus._private import state as _st
    with _owned_lock:
        ids = sorted(_owned)
        _owned.clear()
    state = _st.current()
    if state is None:
        return
    for group_id in ids:
        try:
            state.core.remove_placement_group(group_id)
        except (KeyError, RuntimeError, ValueError):
            pass


# Registered after torus._private.worker's shutdown (imported above), so it runs before it: still connected.
atexit.register(_remove_owned_at_exit)


def get_tpu_version_from_type(accelerator_type):
    """"TPU-V6E" -> "v6e", "tpu7x" -> "v7x", "v5p" -> "v5p"; ValueError for a type Ray does not know."""
    lowered = accelerator_type.lower()
    if lowered.startswith("tpu-"):
        version = lowered.replace("tpu-", "")
    elif lowered.startswith("tpu"):
        version = lowered.replace("tpu", "v")
    else:
        version = lowered
    if version not in _shapes.VALID_TPU_TYPES:
        raise ValueError(f"Invalid accelerator_type: {accelerator_type}. Must be one of "
                         f"{list(_shapes.VALID_TPU_TYPES)} or start with 'TPU-' followed by a valid type.")
    return version


def get_tpu_worker_resources(topology, accelerator_type, resources_per_worker=None, num_slices=1, chips_per_vm=None,
                             tpu_resource_per_chip=None):
    """(workers, resources of one worker) for num_slices slices of a shape: by default one worker per host holding
    {"CPU": 1, "TPU": chips per host}; a smaller "TPU" amount gives that many workers more."""
    if tpu_resource_per_chip is None:
        tpu_resource_per_chip = _shapes.get_tpu_resource_per_chip()
    if tpu_resource_per_chip <= 0:
        raise ValueError("`tpu_resource_per_chip` must be a positive integer.")
    version = get_tpu_version_from_type(accelerator_type)
    per_vm = chips_per_vm if chips_per_vm is not None else _shapes.get_chips_per_host(topology, version)
    if per_vm <= 0:
        raise ValueError("chips_per_vm must be positive.")
    per_vm *= tpu_resource_per_chip
    per_slice = _shapes.get_num_chips_from_topology(topology) * tpu_resource_per_chip
    available = per_slice * num_slices
    resources = resources_per_worker.copy() if resources_per_worker else {}
    resources.setdefault("CPU", 1)
    resources.setdefault("TPU", per_vm)
    tpus = resources["TPU"]
    if tpus <= 0:
        raise ValueError("TPU resources must be positive.")
    if available % tpus != 0:
        raise ValueError(f"Total TPU resources ({available}) not divisible by TPUs requested per worker ({tpus}).")
    if per_slice % tpus != 0:
        raise ValueError(f"The requested resources per worker ({tpus} TPU devices) do not divide evenly into the TPU "
                         f"devices available per slice ({per_slice}). This configuration results in an uneven "
                         "distribution of workers across slices, which is not supported.")
    return int(available // tpus), resources


def _check_like_placement_group(bundle, count, strategy, lifetime, selectors):
    """The checks Ray's placement_group() makes of what SlicePlacementGroup gives it, with its messages."""
    if strategy is not None and strategy not in _STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy}. Supported strategies are: "
                         f"{{{', '.join(repr(s) for s in _STRATEGIES)}}}.")
    if (not all(isinstance(k, str) for k in bundle) or
            not all(isinstance(v, (int, float)) for v in bundle.values())):
        raise ValueError('Bundles must be a non-empty list of resource dictionaries. For example: '
                         '`[{"CPU": 1.0}, {"GPU": 1.0}]`.')
    if all(v == 0 for v in bundle.values()):
        raise ValueError(f"Bundles cannot be an empty dictionary or resources with only 0 values. Bundles: "
                         f"{[bundle] * count}")
    core = None
    for selector in selectors:
        if (not isinstance(selector, dict) or not all(isinstance(k, str) for k in selector) or
                not all(isinstance(v, str) for v in selector.values())):
            raise ValueError('Bundle label selector must be a list of string dictionary label selectors. For '
                             'example: `[{ray.io/market_type": "spot"}, {"ray.io/accelerator-type": "A100"}]`.')
        from torus._private import state as _st
        core = core or _st.import_core()
        try:
            core.check_label_selector(selector)
        except ValueError as e:
            raise ValueError(f"Invalid label selector provided in bundle_label_selector list. Detailed error: "
                             f"'{e}'") from None
    if lifetime not in (None, "detached"):
        raise ValueError(f"Placement group `lifetime` argument must be either `None` or 'detached'. Got {lifetime}.")


class SlicePlacementGroup:
    """num_slices whole TPU slices of `topology` on `accelerator_version` (e.g. "4x4", "v6e"), held for this
    program: one bundle per host ({"CPU": 1, "TPU": chips per host}) or per `resources_per_bundle`, ordered by slice
    then TPU worker id. See the module docstring for how it differs from Ray's."""

    def __init__(self, topology, accelerator_version, resources_per_bundle=None, strategy="SPREAD", name="",
                 lifetime=None, num_slices=1, chips_per_vm=None,
                 head_reservation_timeout_s=_shapes.DEFAULT_TPU_HEAD_RESERVATION_TIMEOUT_S,
                 bundle_label_selector=None, pg_per_slice=False, tpu_resource_per_chip=None):
        self._managed_pgs = []
        self._head_slots = []  # per slice Ray would reserve a head for: True until release_head_pgs() takes it
        self._bundle_label_selector = []
        self._pg_per_slice = pg_per_slice
        self._user_bundle_label_selector = bundle_label_selector or []
        self._topology = topology.strip().lower()
        self._accelerator_version = get_tpu_version_from_type(accelerator_version.strip())
        self._resources_per_bundle = resources_per_bundle or {}
        self._num_slices = num_slices
        self._head_reservation_timeout_s = head_reservation_timeout_s
        if tpu_resource_per_chip is None:
            tpu_resource_per_chip = _shapes.get_tpu_resource_per_chip()
        self._tpu_resource_per_chip = tpu_resource_per_chip
        self._num_bundles, self._bundle_resources = get_tpu_worker_resources(
            topology=self._topology, accelerator_type=self._accelerator_version,
            resources_per_worker=resources_per_bundle, num_slices=num_slices, chips_per_vm=chips_per_vm,
            tpu_resource_per_chip=tpu_resource_per_chip)
        if chips_per_vm is not None and chips_per_vm <= 0:
            raise ValueError("chips_per_vm must be positive.")
        self._chips_per_host = (chips_per_vm if chips_per_vm is not None
                                else _shapes.get_chips_per_host(self._topology, self._accelerator_version))
        if self._chips_per_host <= 0:
            raise ValueError(f"Resolved chips per host must be positive, got {self._chips_per_host}")
        self._logical_devices_per_host = self._chips_per_host * tpu_resource_per_chip
        total = _shapes.get_num_chips_from_topology(self._topology) * tpu_resource_per_chip
        self._num_hosts = max(1, total // self._logical_devices_per_host) * num_slices
        if not _shapes.is_valid_tpu_accelerator_topology(self._accelerator_version, self._topology):
            raise ValueError(f"Invalid accelerator topology: '{self._topology}' for accelerator version: "
                             f"'{self._accelerator_version}'")
        self._reserve(strategy, name, lifetime)

    # Reservation.

    def _selectors_by_slice(self):
        """The user's per-bundle selectors, grouped by slice (one list per slice; [{}...] when none were given)."""
        if self._user_bundle_label_selector and len(self._user_bundle_label_selector) != self._num_bundles:
            raise ValueError(f"bundle_label_selector length ({len(self._user_bundle_label_selector)}) must match "
                             f"the number of bundles ({self._num_bundles}).")
        per_slice = self._num_bundles // self._num_slices
        given = list(self._user_bundle_label_selector) + [{}] * (self._num_bundles -
                                                                 len(self._user_bundle_label_selector))
        return [[s or {} for s in given[i * per_slice:(i + 1) * per_slice]] for i in range(self._num_slices)]

    def _per_chip(self, strategy):
        """Whether the slice group has a bundle per chip block (else per host); ValueError for what it cannot
        hold."""
        if self._tpu_resource_per_chip != 1:
            raise ValueError(f"tpu_resource_per_chip={self._tpu_resource_per_chip}: torus counts TPU in whole chips "
                             "and its nodes advertise one TPU per chip; only 1 is supported")
        tpus = self._bundle_resources["TPU"]
        if tpus > self._chips_per_host:
            raise ValueError(f"resources_per_bundle: a bundle of {tpus} TPU does not fit a host of "
                             f"{self._chips_per_host} chips (on Ray the placement group would never be ready)")
        per_host = self._chips_per_host // tpus if tpus == int(tpus) else 0
        hosts = self._num_hosts // self._num_slices
        if strategy == "STRICT_SPREAD" and per_host > 1:
            raise ValueError(f"strategy: STRICT_SPREAD cannot place {per_host} bundles on each host of a "
                             f"{self._topology} slice (on Ray the placement group would never be ready)")
        groups = self._num_slices if self._pg_per_slice else 1
        if strategy == "STRICT_PACK" and hosts * (self._num_slices // groups) > 1:
            raise ValueError(f"strategy: STRICT_PACK cannot place the bundles of {hosts * self._num_slices // groups} "
                             "hosts on one node (on Ray the placement group would never be ready)")
        return tpus < self._chips_per_host

    def _reserve(self, strategy, name, lifetime):
        selectors = self._selectors_by_slice()
        multi_host = _shapes.get_num_chips_from_topology(self._topology) > self._chips_per_host
        # Ray reserves a head per multi-host slice whose selectors do not name a slice already.
        self._head_slots = [True for s in selectors if multi_host and not any(SLICE_NAME_LABEL in x for x in s)]
        _check_like_placement_group(self._bundle_resources, self._num_bundles, strategy, lifetime,
                                    [x for s in selectors for x in s])
        per_chip = self._per_chip(strategy)
        groups = [[s] for s in selectors] if self._pg_per_slice else [selectors]
        try:
            for i, group_selectors in enumerate(groups):
                group_name = (f"{name}_slice_{i}" if name else "") if self._pg_per_slice else name
                self._reserve_group(group_name, group_selectors, per_chip, lifetime, multi_host)
        except BaseException:
            self.shutdown()
            raise
        self._bundle_label_selector = []
        for pg, group_selectors in zip(self._managed_pgs, groups):
            slices = pg._slice_names if multi_host else [None] * len(group_selectors)
            for slice_name, slice_selectors in zip(slices, group_selectors):
                for s in slice_selectors:
                    self._bundle_label_selector.append(dict(s, **{SLICE_NAME_LABEL: slice_name}) if slice_name
                                                       else dict(s))

    def _reserve_group(self, name, selectors, per_chip, lifetime, multi_host):
        """One slice group of len(selectors) slices (`selectors`: per slice, the user's selector of each of its
        bundles), added to the managed groups; waits for it when the shape is multi-host, as Ray waits for its head
        reservations."""
        flat = [s for slice_selectors in selectors for s in slice_selectors]
        if any(s != flat[0] for s in flat):
            raise ValueError("bundle_label_selector: torus reserves a slice group with one label selector for every "
                             "host, and these differ between bundles of one group; give every bundle the same "
                             "selector (or, with pg_per_slice=True, every bundle of a slice)")
        selector = dict(flat[0]) if flat else {}
        if per_chip and self._topology == "2x4" and self._accelerator_version in _shapes.TPU_8_CHIPS_PER_HOST_TYPES:
            # 2x4 is one 8-chip host or two 4-chip ones; the per-host TPU amount settles it, a per-chip one does not.
            selector.setdefault(_CHIPS_PER_HOST_LABEL, str(self._chips_per_host))
        resources = {k: _fixed(f"resources_per_bundle[{k!r}]", v) for k, v in self._bundle_resources.items()}
        state = _worker.state_or_init()
        try:
            view = state.core.reserve_slices(name, "TPU-" + self._accelerator_version.upper(), self._topology,
                                             len(selectors), resources, bool(per_chip), selector, 0.0)
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"slice_placement_group: {e}") from None
        pg = PlacementGroup(view["id"], [{k: float(v) for k, v in self._bundle_resources.items()} for _ in flat])
        pg._slice_names = []
        if lifetime is None and not state.is_worker:
            with _owned_lock:
                _owned.add(view["id"])
        self._managed_pgs.append(pg)
        if multi_host:
            pg._slice_names = self._wait_for_slices(state, pg)

    def _wait_for_slices(self, state, pg):
        """The group's slices in bundle order once it holds them; TimeoutError after head_reservation_timeout_s."""
        timeout_s = self._head_reservation_timeout_s
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        while True:
            left_ms = _MAX_WAIT_MS if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
            view = state.core.get_placement_group(pg.id._torus_id(), max(1, min(left_ms, _MAX_WAIT_MS)))
            if view["state"] == "CREATED":
                names = []
                for b in view["bundles"]:
                    if b["slice_name"] not in names:
                        names.append(b["slice_name"])
                return names
            ended = view["state"] in ("REMOVED", "FAILED")
            if ended or (deadline is not None and time.monotonic() >= deadline):
                pod_type = _shapes.infer_tpu_pod_type_from_topology(
                    self._topology, "TPU-" + self._accelerator_version.upper())
                raise TimeoutError(f"Failed to reserve TPU head for slice with shape: {pod_type} after {timeout_s} "
                                   f"seconds. Ensure your cluster has sufficient resources. (torus: slice group "
                                   f"{view['id']} is {view['state']}: {view['reason']})")

    # Ray's properties.

    @property
    def tpu_resource_per_chip(self):
        return self._tpu_resource_per_chip

    @property
    def slice_placement_group(self):
        """The group of every slice; ValueError with pg_per_slice=True."""
        if self._pg_per_slice:
            raise ValueError("pg_per_slice=True, use `slice_placement_groups` instead.")
        return self._managed_pgs[0] if self._managed_pgs else None

    @property
    def placement_group(self):
        return self.slice_placement_group

    @property
    def slice_placement_groups(self):
        """One group per slice; ValueError with pg_per_slice=False."""
        if not self._pg_per_slice:
            raise ValueError("pg_per_slice=False, use `slice_placement_group` instead.")
        return self._managed_pgs

    @property
    def chips_per_host(self):
        return self._chips_per_host

    @property
    def devices_per_host(self):
        return self._logical_devices_per_host

    @property
    def num_hosts(self):
        return self._num_hosts

    @property
    def num_bundles(self):
        return self._num_bundles

    @property
    def topology(self):
        return self._topology

    @property
    def accelerator_version(self):
        return self._accelerator_version

    @property
    def num_slices(self):
        return self._num_slices

    @property
    def head_placement_groups(self):
        """Always []: torus reserves the slices themselves, with no head placement groups."""
        return []

    @property
    def bundle_label_selector(self):
        return self._bundle_label_selector

    @property
    def bundle_resources(self):
        return self._bundle_resources

    def release_head_pgs(self, slice_index=None):
        """Nothing to release under torus (the slice group holds the slices); checks slice_index as Ray does."""
        if slice_index is not None:
            if slice_index < 0 or slice_index >= len(self._head_slots):
                raise ValueError(f"Invalid slice_index: {slice_index}.")
            self._head_slots[slice_index] = False
            return
        self._head_slots = [False] * len(self._head_slots)

    def shutdown(self):
        """Removes the groups (idempotent; safe on a partly built handle)."""
        groups = getattr(self, "_managed_pgs", [])
        self._managed_pgs = []
        for pg in groups:
            with _owned_lock:
                _owned.discard(pg.id._torus_id())
            try:
                remove_placement_group(pg)
            except Exception:  # noqa: BLE001 - as Ray: logged, the others are still removed
                logger.exception("Failed to remove TPU worker placement group %s.", getattr(pg, "id", pg))
        self.release_head_pgs()


def slice_placement_group(topology, accelerator_version, resources_per_bundle=None, num_slices=1, chips_per_vm=None,
                          pg_per_slice=False, tpu_resource_per_chip=None, **kwargs):
    """A SlicePlacementGroup of num_slices slices; kwargs are its strategy, name, lifetime,
    head_reservation_timeout_s and bundle_label_selector."""
    return SlicePlacementGroup(topology=topology, accelerator_version=accelerator_version,
                               resources_per_bundle=resources_per_bundle, num_slices=num_slices,
                               chips_per_vm=chips_per_vm, pg_per_slice=pg_per_slice,
                               tpu_resource_per_chip=tpu_resource_per_chip, **kwargs)
