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
