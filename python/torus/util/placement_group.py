"""Placement groups (as ray.util.placement_group): bundles of resources the head reserves atomically.

    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD", name="pair")
    ray.get(pg.ready())                       # resolves to pg once the head holds every bundle
    f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    placement_group_table(pg)["state"]        # "CREATED"
    remove_placement_group(pg)

A group's id is a PlacementGroupID: `binary()` is the head's id ("pg-4k1x0q9z2a"), `hex()` its hex spelling (the
keys of placement_group_table(), get_runtime_context().get_placement_group_id()). Arguments are checked as Ray 2.60
checks them (same errors). `fallback_strategy` (Ray's later API: [{"bundles": [...], "bundle_label_selector": [...]}],
tried in order when the bundles cannot be placed) is the head's; this build's core refuses it (see placement()).
A group without lifetime="detached" that a driver made is removed when the driver exits; group names are unique in
the cluster (Ray's are per namespace).
"""

import atexit
import os
import warnings

from torus._private import options as _options
from torus._private import serialization as ser
from torus._private import state as _st
from torus._private import worker as _worker
from torus._private.object_ref import ObjectRef
from torus import exceptions

VALID_PLACEMENT_GROUP_STRATEGIES = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}
VALID_PLACEMENT_GROUP_FALLBACK_OPTIONS = {"bundles", "bundle_label_selector"}
NODE_ID_LABEL_KEY = "ray.io/node-id"

# In a task or actor worker started inside a group: the group, and whether its children join it (options.py).
GROUP_ENV = "TORUS_PLACEMENT_GROUP_ID"
CAPTURE_ENV = "TORUS_PLACEMENT_GROUP_CAPTURE"


class PlacementGroupID:
    """A placement group's id: `binary()` the head's id as bytes, `hex()` their hex spelling; nil is empty."""

    __slots__ = ("_binary",)

    def __init__(self, binary):
        if isinstance(binary, str):
            binary = binary.encode()
        if not isinstance(binary, bytes):
            raise TypeError(f"PlacementGroupID takes bytes, got {type(binary).__name__}")
        self._binary = binary

    @classmethod
    def from_hex(cls, hex_id):
        return cls(bytes.fromhex(hex_id))

    @classmethod
    def nil(cls):
        return cls(b"")

    def binary(self):
        return self._binary

    def hex(self):
        return self._binary.hex()

    def is_nil(self):
        return not self._binary

    def _torus_id(self):
        return self._binary.decode()

    def __eq__(self, other):
        return isinstance(other, PlacementGroupID) and other._binary == self._binary

    def __hash__(self):
        return hash(self._binary)

    def __reduce__(self):
        return (PlacementGroupID, (self._binary,))

    def __repr__(self):
        return f"PlacementGroupID({self.hex()})"


class PlacementGroup:
    """A handle to a placement group (or a slice group): `id`, `bundle_specs`, `bundle_count`, `ready()`, `wait()`."""

    @staticmethod
    def empty():
        return PlacementGroup(PlacementGroupID.nil())

    def __init__(self, id, bundle_cache=None):
        self.id = id if isinstance(id, PlacementGroupID) else PlacementGroupID(id)
        self.bundle_cache = bundle_cache

    @property
    def is_empty(self):
        return self.id.is_nil()

    def ready(self):
        """An ObjectRef that resolves to this group once it is CREATED; `get` raises TaskUnschedulableError if it is
        removed or fails first."""
        if self.is_empty:
            return _worker.put(self)
        state = _worker.state_or_init()
        object_id = state.core.group_ready_ref(self.id._torus_id(), ser.dumps(self))
        return ObjectRef(object_id, state.core.address)

    def wait(self, timeout_seconds=30):
        """True once the group is CREATED, False if it is not within `timeout_seconds`."""
        view = _get_view(self.id._torus_id(), int(timeout_seconds * 1000))
        return view is not None and view["state"] == "CREATED"

    @property
    def bundle_specs(self):
        """The bundles' resources ({"CPU": 1.0}, ...), in bundle order."""
        self._fill_bundle_cache_if_needed()
        return self.bundle_cache

    @property
    def bundle_count(self):
        self._fill_bundle_cache_if_needed()
        return len(self.bundle_cache)

    def _fill_bundle_cache_if_needed(self):
        if not self.bundle_cache:
            from torus.util import _group_views
            row = _group_views.table_row(self.id._torus_id())
            self.bundle_cache = list(row["bundles"].values()) if row else []

    def table(self):
        """The head's view of this group: state, reason, and each bundle's node, slice, TPU worker id and chips."""
        return _worker.state_or_init().core.get_placement_group(self.id._torus_id(), 0)

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and self.id == other.id

    def __hash__(self):
        return hash(self.id)

    def __reduce__(self):
        return (PlacementGroup, (self.id, self.bundle_cache))

    def __repr__(self):
        return f"PlacementGroup({self.id.binary().decode() or 'nil'})"


def _get_view(group_id, wait_ms):
    try:
        return _worker.state_or_init().core.get_placement_group(group_id, wait_ms)
    except KeyError:
        return None


def _fixed(field, amount):
    """`amount` of a resource in the core's fixed point (1/10000)."""
    return _options.fixed(field, amount)


def _validate_bundles(bundles):
    if not isinstance(bundles, list):
        raise ValueError(f"Placement group bundles must be a list, got {type(bundles)}.")
    if len(bundles) == 0:
        raise ValueError("Bundles must be a non-empty list of resource dictionaries. For example: "
                         "`[{\"CPU\": 1.0}, {\"GPU\": 1.0}]`. Got empty list instead.")
    for bundle in bundles:
        if (not isinstance(bundle, dict) or not all(isinstance(k, str) for k in bundle)
                or not all(isinstance(v, (int, float)) for v in bundle.values())):
            raise ValueError("Bundles must be a non-empty list of resource dictionaries. For example: "
                             "`[{\"CPU\": 1.0}, {\"GPU\": 1.0}]`.")
        if len(bundle) == 0 or all(v == 0 for v in bundle.values()):
            raise ValueError(f"Bundles cannot be an empty dictionary or resources with only 0 values. "
                             f"Bundles: {bundles}")
        if "object_store_memory" in bundle:
            warnings.warn("Setting 'object_store_memory' for bundles is deprecated since it doesn't actually reserve "
                          "the required object store memory.", DeprecationWarning, stacklevel=3)


def _validate_bundle_label_selector(selectors):
    if not isinstance(selectors, list):
        raise ValueError(f"Placement group bundle_label_selector must be a list, got {type(selectors)}.")
    for selector in selectors:
        if (not isinstance(selector, dict) or not all(isinstance(k, str) for k in selector)
                or not all(isinstance(v, str) for v in selector.values())):
            raise ValueError("Bundle label selector must be a list of string dictionary label selectors. For "
                             "example: `[{ray.io/market_type\": \"spot\"}, {\"ray.io/accelerator-type\": \"A100\"}]`.")
        message = _options.label_selector_error(selector)
        if message:
            raise ValueError(f"Invalid label selector provided in bundle_label_selector list. Detailed error: "
                             f"'{message}'")


def _validate_topology_strategy(topology_strategy):
    if not isinstance(topology_strategy, dict):
        raise ValueError(f"`topology_strategy` must be a dict, got {type(topology_strategy).__name__}.")
    if len(topology_strategy) > 2:
        raise ValueError(f"`topology_strategy` must contain 0, 1, or 2 entries: `{NODE_ID_LABEL_KEY}` plus an "
                         f"optional topology label. Got {len(topology_strategy)} entries.")
    others = []
    for key, value in topology_strategy.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"`topology_strategy` keys must be non-empty strings, got {key!r}.")
        if value not in VALID_PLACEMENT_GROUP_STRATEGIES:
            raise ValueError(f"Invalid topology strategy {value!r} for label {key!r}. Supported strategies are: "
                             f"{VALID_PLACEMENT_GROUP_STRATEGIES}.")
        if key != NODE_ID_LABEL_KEY:
            others.append(key)
            if value != "STRICT_PACK":
                raise ValueError(f"Topology strategy {value!r} for label {key!r} is not supported yet; only "
                                 f"'STRICT_PACK' is supported for topology labels other than `{NODE_ID_LABEL_KEY}` "
                                 f"for now.")
    if len(others) > 1:
        raise ValueError(f"`topology_strategy` currently supports at most one topology label other than "
                         f"`{NODE_ID_LABEL_KEY}`. Got {others}.")


def _validate_fallback_strategy(fallback_strategy):
    if not isinstance(fallback_strategy, list):
        raise ValueError(f"fallback_strategy must be a list, got {type(fallback_strategy)}.")
    for i, option in enumerate(fallback_strategy):
        if not isinstance(option, dict):
            raise ValueError(f"fallback_strategy[{i}] must be a dict, got {type(option)}.")
        if "bundles" not in option:
            raise ValueError(f"fallback_strategy[{i}] must contain 'bundles'.")
        _validate_bundles(option["bundles"])
        if "bundle_label_selector" in option:
            if len(option["bundles"]) != len(option["bundle_label_selector"]):
                raise ValueError(f"In fallback_strategy[{i}], length of `bundle_label_selector` must equal length "
                                 f"of `bundles`.")
            _validate_bundle_label_selector(option["bundle_label_selector"])
        invalid = set(option) - VALID_PLACEMENT_GROUP_FALLBACK_OPTIONS
        if invalid:
            raise ValueError(f"fallback_strategy[{i}] contains invalid options: {invalid}. Supported options are: "
                             f"{VALID_PLACEMENT_GROUP_FALLBACK_OPTIONS}")


def validate_placement_group(bundles, strategy=None, lifetime=None, _soft_target_node_id=None,
                             bundle_label_selector=None, topology_strategy=None, fallback_strategy=None):
    """Raises Ray's ValueError for arguments Ray refuses (in Ray's order)."""
    if topology_strategy is not None and strategy is not None:
        raise ValueError(f"`strategy` and `topology_strategy` cannot both be specified. Pass node-level packing via "
                         f"`topology_strategy['{NODE_ID_LABEL_KEY}']`.")
    if strategy is not None and strategy not in VALID_PLACEMENT_GROUP_STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy}. Supported strategies are: "
                         f"{VALID_PLACEMENT_GROUP_STRATEGIES}.")
    if topology_strategy is not None:
        _validate_topology_strategy(topology_strategy)
    node_level = _node_level_strategy(strategy, topology_strategy)
    if _soft_target_node_id and node_level != "STRICT_PACK":
        raise ValueError(f"_soft_target_node_id currently only works with STRICT_PACK but got {node_level}")
    _validate_bundles(bundles)
    if bundle_label_selector is not None:
        if len(bundles) != len(bundle_label_selector):
            raise ValueError(f"Invalid bundle label selector {bundle_label_selector}. The length of "
                             f"`bundle_label_selector` should equal the length of `bundles`.")
        _validate_bundle_label_selector(bundle_label_selector)
    if lifetime not in (None, "detached"):
        raise ValueError(f"Placement group `lifetime` argument must be either `None` or 'detached'. Got {lifetime}.")
    if fallback_strategy is not None:
        _validate_fallback_strategy(fallback_strategy)


def _node_level_strategy(strategy, topology_strategy):
    if topology_strategy is not None:
        return topology_strategy.get(NODE_ID_LABEL_KEY, "PACK")
    return strategy if strategy is not None else "PACK"


def _unsupported(what, why):
    return ValueError(f"placement_group: {what} is not supported by torus: {why}")


def placement_group(bundles, strategy=None, name="", lifetime=None, _soft_target_node_id=None,
                    bundle_label_selector=None, topology_strategy=None, fallback_strategy=None):
    """Reserves `bundles` (resource dicts, e.g. [{"CPU": 1, "TPU": 4}] * 4) atomically with `strategy` (PACK by
    default, SPREAD, STRICT_PACK, STRICT_SPREAD); returns the PlacementGroup at once, which the head places as soon
    as the cluster can hold it. `bundle_label_selector`: one label selector per bundle."""
    validate_placement_group(bundles, strategy, lifetime, _soft_target_node_id, bundle_label_selector,
                             topology_strategy, fallback_strategy)
    if _soft_target_node_id:
        raise _unsupported("_soft_target_node_id", "the head has no soft node preference for groups")
    if topology_strategy is not None and set(topology_strategy) - {NODE_ID_LABEL_KEY}:
        raise _unsupported(f"topology_strategy {topology_strategy}",
                           f"only the `{NODE_ID_LABEL_KEY}` entry (the strategy) is honoured")
    node_level = _node_level_strategy(strategy, topology_strategy)
    fixed = [{k: _fixed(f"bundles[{i}][{k!r}]", v) for k, v in b.items() if v != 0} for i, b in enumerate(bundles)]
    selectors = [dict(s) for s in (bundle_label_selector or [])]
    # Each fallback: its bundles (and selectors), tried in order when those before cannot be placed.
    fallbacks = [([{k: _fixed(f"fallback_strategy[{j}]['bundles'][{i}][{k!r}]", v) for k, v in b.items() if v != 0}
                   for i, b in enumerate(option["bundles"])],
                  [dict(s) for s in (option.get("bundle_label_selector") or [])])
                 for j, option in enumerate(fallback_strategy or [])]
    state = _worker.state_or_init()
    try:
        view = state.core.create_placement_group(name, node_level, fixed, selectors, 0.0, fallbacks)
    except (ValueError, RuntimeError) as e:
        raise ValueError(f"placement_group: {e}") from None
    pg = PlacementGroup(PlacementGroupID(view["id"]), [{k: float(v) for k, v in b.items()} for b in bundles])
    if lifetime is None and not state.is_worker:
        _owned.setdefault(id(state), (state, set()))[1].add(view["id"])
    return pg


# Groups without lifetime="detached" that this driver made, per connection: removed when it exits.
_owned = {}


def _remove_owned_at_exit():
    state = _st.current()
    if state is None:
        return
    _, groups = _owned.pop(id(state), (None, set()))
    for group_id in groups:
        try:
            state.core.remove_placement_group(group_id)
        except Exception:  # noqa: BLE001 - the head may be gone already; the process is ending
            pass


# Registered after worker.shutdown's hook, so it runs first (atexit runs last-registered first), while connected.
atexit.register(_remove_owned_at_exit)


def remove_placement_group(placement_group):
    """Releases everything the group holds; tasks and actors running in it are stopped. Removing a removed group
    does nothing."""
    assert placement_group is not None
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group takes a PlacementGroup, got {type(placement_group).__name__}")
    group_id = placement_group.id._torus_id()
    state = _worker.state_or_init()
    try:
        state.core.remove_placement_group(group_id)
    except KeyError as e:
        raise exceptions.TorusError(str(e)) from None
    _owned.get(id(state), (None, set()))[1].discard(group_id)


def get_placement_group(placement_group_name):
    """The live group named `placement_group_name`; ValueError when there is none."""
    if not placement_group_name:
        raise ValueError("Please supply a non-empty value to get_placement_group")
    view = _get_view(placement_group_name, 0)
    if view is None or view["name"] != placement_group_name or view["state"] in ("REMOVED", "FAILED"):
        raise ValueError(f"Failed to look up placement group with name: {placement_group_name}")
    return PlacementGroup(PlacementGroupID(view["id"]))


def placement_group_table(placement_group=None):
    """Ray's table: for one group {"placement_group_id", "name", "bundles", "bundles_to_node_id", "strategy", "state",
    "stats"} ({} when the head does not know it), or {hex id: that} for every group of the cluster."""
    from torus.util import _group_views
    _worker.state_or_init()
    if placement_group is not None:
        return _group_views.table_row(placement_group.id._torus_id()) or {}
    return _group_views.table_all()


def get_current_placement_group():
    """The group the running task or actor was placed in; None in a driver or outside any group."""
    state = _worker.state_or_init()
    group_id = os.environ.get(GROUP_ENV) if state.is_worker else None
    if not group_id:
        return None
    return PlacementGroup(PlacementGroupID(group_id))


def current_capture():
    """Whether the running task or actor's children join its group by default (placement_group_capture_child_tasks).
    False in a driver."""
    state = _st.current()
    return bool(state is not None and state.is_worker and os.environ.get(CAPTURE_ENV) == "1"
                and os.environ.get(GROUP_ENV))


def check_placement_group_index(placement_group, bundle_index):
    """Ray's ValueError for a bundle index the group does not have (-1: any bundle)."""
    assert placement_group is not None
    if placement_group.id.is_nil():
        if bundle_index != -1:
            raise ValueError("If placement group is not set, the value of bundle index must be -1.")
    elif bundle_index >= placement_group.bundle_count or bundle_index < -1:
        raise ValueError(f"placement group bundle index {bundle_index} is invalid. Valid placement group indexes: "
                         f"0-{placement_group.bundle_count}")
