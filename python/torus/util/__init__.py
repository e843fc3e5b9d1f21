"""torus.util (as ray.util): ActorPool, placement groups, scheduling strategies, the cluster's state and TPU helpers,
accelerator names, this node's address, results as they finish (as_completed, map_unordered), log_once, custom
serializers and inspect_serializability; torus.util.queue holds Queue."""

from torus._private.services import get_node_instance_id, get_node_ip_address
from torus.util import accelerators, scheduling_strategies, state, tpu
from torus.util._named_actors import list_named_actors
from torus.util.actor_pool import ActorPool
from torus.util.check_serialize import inspect_serializability
from torus.util.debug import disable_log_once_globally, enable_periodic_logging, log_once
from torus.util.helpers import as_completed, map_unordered
from torus.util.placement_group import (PlacementGroup, get_current_placement_group, get_placement_group,
                                        placement_group, placement_group_table, remove_placement_group)
from torus.util.serialization import deregister_serializer, register_serializer

__all__ = ["ActorPool", "PlacementGroup", "get_current_placement_group", "get_placement_group", "list_named_actors",
           "placement_group", "placement_group_table", "remove_placement_group", "scheduling_strategies", "state", "tpu",
           "accelerators", "as_completed", "deregister_serializer", "disable_log_once_globally",
           "enable_periodic_logging", "get_node_instance_id", "get_node_ip_address", "inspect_serializability",
           "log_once", "map_unordered", "register_serializer"]
