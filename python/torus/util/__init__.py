"""torus.util: placement groups, scheduling strategies and TPU helpers (as ray.util)."""

from torus.util import scheduling_strategies, state, tpu
from torus.util.placement_group import PlacementGroup, placement_group, remove_placement_group

__all__ = ["PlacementGroup", "placement_group", "remove_placement_group", "scheduling_strategies", "state", "tpu"]
