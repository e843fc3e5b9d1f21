"""torus.util (as ray.util): ActorPool, placement groups, scheduling strategies, the cluster's state and TPU helpers;
torus.util.queue holds Queue."""

from torus.util import scheduling_strategies, state, tpu
from torus.util.actor_pool import ActorPool
from torus.util.placement_group import (PlacementGroup, get_current_placement_group, get_placement_group,
                                        placement_group, placement_group_table, remove_placement_group)

__all__ = ["ActorPool", "PlacementGroup", "get_current_placement_group", "get_placement_group", "placement_group",
           "placement_group_table", "remove_placement_group", "scheduling_strategies", "state", "tpu"]
