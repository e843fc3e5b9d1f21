"""Placement groups from Python (as ray.util.placement_group): bundles of resources reserved atomically by the head."""

from torus._private import serialization as ser
from torus._private import worker as _worker
from torus._private.object_ref import ObjectRef
from torus import exceptions

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _fixed(field, amount):
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
        raise ValueError(f"{field}: a non-negative number is required, got {amount!r}")
    return int(round(amount * 10000))


class PlacementGroup:
    """A placement group (or a slice group) held by the head. `id` is its id; `bundle_specs` what each bundle holds."""

    def __init__(self, group_id, bundle_specs=None):
        self.id = group_id
        self.bundle_specs = bundle_specs or []

    @property
    def bundle_count(self):
        return len(self.bundle_specs)

    def ready(self):
        """An ObjectRef that resolves (to this group) once it is CREATED; `get` raises TaskUnschedulableError if it
        is removed or fails first."""
        state = _worker.state_or_init()
        object_id = state.core.group_ready_ref(self.id, ser.dumps(self))
        return ObjectRef(object_id, state.core.address)

    def wait(self, timeout_seconds=30):
        """True once the group is CREATED, False if it is not within `timeout_seconds`."""
        view = _worker.state_or_init().core.get_placement_group(self.id, int(timeout_seconds * 1000))
        return view["state"] == "CREATED"

    def table(self):
        """The head's view: state, reason, and each bundle's node, slice, worker id and chips."""
        return _worker.state_or_init().core.get_placement_group(self.id, 0)

    def __reduce__(self):
        return (PlacementGroup, (self.id, self.bundle_specs))

    def __repr__(self):
        return f"PlacementGroup({self.id})"


def placement_group(bundles, strategy="PACK", name="", lifetime=None, bundle_label_selector=None, timeout_s=0):
    """Reserves `bundles` (a list of resource dicts, e.g. [{"CPU": 1, "TPU": 4}] * 4) atomically with `strategy`;
    returns at once with the group, which the head places as soon as the cluster can hold it."""
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy: one of {', '.join(_STRATEGIES)} is required, got {strategy!r}")
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError("bundles: a non-empty list of resource dicts is required")
    if lifetime not in (None, "detached"):
        raise ValueError(f"lifetime: None or 'detached', got {lifetime!r}")
    fixed = []
    for i, b in enumerate(bundles):
        if not isinstance(b, dict) or not b:
            raise ValueError(f"bundles[{i}]: a non-empty dict of resources is required, got {b!r}")
        fixed.append({k: _fixed(f"bundles[{i}][{k!r}]", v) for k, v in b.items()})
    selectors = list(bundle_label_selector or [])
    if selectors and len(selectors) != len(bundles):
        raise ValueError(f"bundle_label_selector: one selector per bundle is required ({len(bundles)}), "
                         f"got {len(selectors)}")
    state = _worker.state_or_init()
    try:
        view = state.core.create_placement_group(name, strategy, fixed, selectors, float(timeout_s))
    except (ValueError, RuntimeError) as e:
        raise ValueError(f"placement_group: {e}") from None
    return PlacementGroup(view["id"], [dict(b) for b in bundles])


def remove_placement_group(pg):
    """Releases everything the group holds; tasks and actors running in it are stopped."""
    if not isinstance(pg, PlacementGroup):
        raise TypeError(f"remove_placement_group takes a PlacementGroup, got {type(pg).__name__}")
    try:
        _worker.state_or_init().core.remove_placement_group(pg.id)
    except KeyError as e:
        raise exceptions.TorusError(str(e)) from None
