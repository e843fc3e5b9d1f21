"""Where a task or actor runs (as ray.util.scheduling_strategies): the `scheduling_strategy` option takes "DEFAULT"
(this machine's node first, then any node that can hold it), "SPREAD", or one of the classes below.

    f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0))
    f.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    f.options(scheduling_strategy=NodeLabelSchedulingStrategy({"ray.io/accelerator-type": In("TPU-V6E")}))

The classes check their arguments as Ray's do (same errors); torus/_private/options.py `placement()` turns them into
the core's forms when the task is submitted, and refuses there what torus cannot honour, naming it.
"""

import re

# A torus node id: 1-64 of [0-9A-Za-z_-] (the agent's --node-id rule); ids from torus.nodes() are hex.
_NODE_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")


class PlacementGroupSchedulingStrategy:
    """Run inside `placement_group` (None: in no group): in bundle `placement_group_bundle_index`, or in any of its
    bundles (-1). With `placement_group_capture_child_tasks=True`, the tasks and actors this one submits without a
    strategy of their own run in the same group."""

    def __init__(self, placement_group, placement_group_bundle_index=-1, placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def __repr__(self):
        return (f"PlacementGroupSchedulingStrategy({self.placement_group!r}, {self.placement_group_bundle_index}, "
                f"{self.placement_group_capture_child_tasks})")


class NodeAffinitySchedulingStrategy:
    """Run on the node `node_id` (a "NodeID" of torus.nodes(), or get_runtime_context().get_node_id()). soft=False:
    only there, failing when it is not an alive node; soft=True: there first, elsewhere when it is gone or busy
    (torus spills a busy node's work after the agent's lease wait, as Ray does with _spill_on_unavailable=True).
    _fail_on_unavailable=True (fail at once when the node is busy) is refused at submission: torus waits."""

    def __init__(self, node_id, soft, _spill_on_unavailable=False, _fail_on_unavailable=False):
        if not isinstance(node_id, str):
            node_id = node_id.hex()
        self.node_id = node_id
        self.soft = soft
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable
        self._validate_attributes()

    def _validate_attributes(self):
        if not _NODE_ID.match(self.node_id) or set(self.node_id) == {"0"}:
            raise ValueError(f"Invalid node_id '{self.node_id}'. Node ID must be a valid hex string. To get a list of "
                             f"all nodes and their IDs in your cluster, use ray.nodes(). See "
                             f"https://docs.ray.io/en/latest/ray-core/miscellaneous.html#node-information for more "
                             f"details.")
        if self._spill_on_unavailable and not self.soft:
            raise ValueError("_spill_on_unavailable cannot be set when soft is False. Please set soft to True to use "
                             "_spill_on_unavailable.")
        if self._fail_on_unavailable and self.soft:
            raise ValueError("_fail_on_unavailable cannot be set when soft is True. Please set soft to False to use "
                             "_fail_on_unavailable.")

    def __repr__(self):
        return f"NodeAffinitySchedulingStrategy(node_id={self.node_id!r}, soft={self.soft})"


def _check_operator_values(values, operator):
    if not values:
        raise ValueError(f"The variadic parameter of the {operator} operator must be a non-empty tuple: e.g. "
                         f"{operator}(\"value1\", \"value2\").")
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"Type of value in position {index} for the {operator} operator must be str (e.g. "
                             f"{operator}(\"value1\", \"value2\")) but got {str(value)} of type {type(value)}.")


class In:
    """The label has one of `values`."""

    def __init__(self, *values):
        _check_operator_values(values, "In")
        self.values = list(values)


class NotIn:
    """The label is absent, or has none of `values`."""

    def __init__(self, *values):
        _check_operator_values(values, "NotIn")
        self.values = list(values)


class Exists:
    """The label is present."""

    def __init__(self):
        pass


class DoesNotExist:
    """The label is absent."""

    def __init__(self):
        pass


class _LabelMatchExpression:
    """One key and its operator."""

    def __init__(self, key, operator):
        self.key = key
        self.operator = operator


def _expressions(mapping, param):
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise ValueError(f"The {param} parameter must be a map (e.g. {{\"key1\": In(\"value1\")}}) but got type "
                         f"{type(mapping)}.")
    out = []
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ValueError(f"The map key of the {param} parameter must be of type str (e.g. "
                             f"{{\"key1\": In(\"value1\")}}) but got {str(key)} of type {type(key)}.")
        if not isinstance(value, (In, NotIn, Exists, DoesNotExist)):
            raise ValueError(f"The map value for key {key} of the {param} parameter must be one of the `In`, "
                             f"`NotIn`, `Exists` or `DoesNotExist` operator (e.g. {{\"key1\": In(\"value1\")}}) but "
                             f"got {str(value)} of type {type(value)}.")
        out.append(_LabelMatchExpression(key, value))
    return out


class NodeLabelSchedulingStrategy:
    """Run on a node whose labels match every expression of `hard` (keys to In/NotIn/Exists/DoesNotExist), and of
    `soft` too unless no node can hold the work under them (preferred, not required)."""

    def __init__(self, hard, *, soft=None):
        self.hard = _expressions(hard, "hard")
        self.soft = _expressions(soft, "soft")
        if not (self.hard or self.soft):
            raise ValueError("The `hard` and `soft` parameter of NodeLabelSchedulingStrategy cannot both be empty.")


def label_selector_of(expressions):
    """The core's label selector (key -> expression, reference/semantics.md §3) of match expressions:
    In("a", "b") -> "in(a,b)", NotIn(...) -> "!in(...)", Exists() -> "exists()", DoesNotExist() -> "!exists()"."""
    out = {}
    for e in expressions:
        op = e.operator
        if isinstance(op, In):
            text = f"in({','.join(op.values)})"
        elif isinstance(op, NotIn):
            text = f"!in({','.join(op.values)})"
        elif isinstance(op, Exists):
            text = "exists()"
        else:
            text = "!exists()"
        out[e.key] = text
    return out
