"""TPU helpers (as ray.util.tpu): whole-slice placement groups and facts about the current TPU host."""

import os

from torus.util.placement_group import PlacementGroup, _fixed
from torus._private import worker as _worker


def slice_placement_group(topology, accelerator_version, num_slices=1, resources_per_bundle=None, name="",
                          label_selector=None, timeout_s=0):
    """Reserves `num_slices` whole slices of `accelerator_version` (e.g. "v6e" or "TPU-V6E") with `topology` (e.g.
    "4x4") atomically: one bundle per host, ordered by slice then TPU worker id, each holding `resources_per_bundle`
    (default: {"CPU": 1, "TPU": chips per host}). Returns the PlacementGroup at once; `ready()` says when it holds
    them."""
    accel = accelerator_version.upper()
    if not accel.startswith("TPU-"):
        accel = "TPU-" + accel
    resources = {k: _fixed(f"resources_per_bundle[{k!r}]", v) for k, v in (resources_per_bundle or {}).items()}
    state = _worker.state_or_init()
    try:
        view = state.core.reserve_slices(name, accel, topology, int(num_slices), resources, False,
                                         dict(label_selector or {}), float(timeout_s))
    except (ValueError, RuntimeError) as e:
        raise ValueError(f"slice_placement_group: {e}") from None
    return PlacementGroup(view["id"], [])


def get_current_pod_name():
    """The slice this host belongs to (TPU_NAME), or None off TPUs."""
    return os.environ.get("TPU_NAME") or None


def get_tpu_worker_id():
    """This host's index within its slice (TPU_WORKER_ID), or None."""
    v = os.environ.get("TPU_WORKER_ID")
    return int(v) if v not in (None, "") else None


def get_current_pod_worker_count():
    """How many hosts the slice has (from TPU_WORKER_HOSTNAMES), or None."""
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES")
    return len(hosts.split(",")) if hosts else None


def get_num_tpu_chips_on_node():
    """The TPU chips this process may use (TPU_VISIBLE_CHIPS), 0 off TPUs."""
    chips = os.environ.get("TPU_VISIBLE_CHIPS", "")
    return len([c for c in chips.split(",") if c != ""])
