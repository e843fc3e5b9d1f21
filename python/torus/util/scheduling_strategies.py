"""Where a task or actor runs, beside the default (this machine's node first, then any node that can hold it)."""


class NodeAffinitySchedulingStrategy:
    """Run on the node `node_id` (a NodeID of torus.nodes()); with soft=True, prefer it and fall back to others."""

    def __init__(self, node_id, soft=False):
        if not isinstance(node_id, str) or not node_id:
            raise ValueError(f"NodeAffinitySchedulingStrategy: node_id must be a non-empty string, got {node_id!r}")
        self.node_id = node_id
        self.soft = bool(soft)

    def __repr__(self):
        return f"NodeAffinitySchedulingStrategy(node_id={self.node_id!r}, soft={self.soft})"


class PlacementGroupSchedulingStrategy:
    """Run inside `placement_group`: in bundle `placement_group_bundle_index`, or in any of its bundles (-1). The
    task or actor takes its resources (and TPU chips) from the bundle's, and waits until the group is created."""

    def __init__(self, placement_group, placement_group_bundle_index=-1, placement_group_capture_child_tasks=None):
        from torus.util.placement_group import PlacementGroup
        if not isinstance(placement_group, PlacementGroup):
            raise ValueError(f"PlacementGroupSchedulingStrategy: a PlacementGroup is required, got "
                             f"{type(placement_group).__name__}")
        if not isinstance(placement_group_bundle_index, int) or placement_group_bundle_index < -1:
            raise ValueError(f"placement_group_bundle_index: an integer >= -1 is required, got "
                             f"{placement_group_bundle_index!r}")
        if placement_group_capture_child_tasks:
            raise ValueError("placement_group_capture_child_tasks: not supported")
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
