"""Scheduling strategies: "DEFAULT" and "SPREAD", node affinity (hard and soft), node labels with In, NotIn,
Exists and DoesNotExist, and Ray's errors for bad strategies."""

import ray
from harness import case, out, raised
from ray.util.scheduling_strategies import (DoesNotExist, Exists, In, NodeAffinitySchedulingStrategy,
                                            NodeLabelSchedulingStrategy, NotIn)

# A well-formed node id that no node has.
GONE = "ab" * 28


@ray.remote
def where():
    return ray.get_runtime_context().get_node_id()


def _node():
    return ray.get_runtime_context().get_node_id()


@case
def default_and_spread():
    out(ray.get(where.options(scheduling_strategy="DEFAULT").remote()) == _node(),
        ray.get(where.options(scheduling_strategy="SPREAD").remote()) == _node())


@case
def node_affinity_runs_on_the_node():
    hard = NodeAffinitySchedulingStrategy(node_id=_node(), soft=False)
    soft = NodeAffinitySchedulingStrategy(node_id=_node(), soft=True)
    out(ray.get(where.options(scheduling_strategy=hard).remote()) == _node(),
        ray.get(where.options(scheduling_strategy=soft).remote()) == _node(), hard.node_id == _node(), hard.soft)


@case
def soft_affinity_to_a_missing_node_runs_elsewhere():
    s = NodeAffinitySchedulingStrategy(node_id=GONE, soft=True)
    out(ray.get(where.options(scheduling_strategy=s).remote(), timeout=60) == _node())


@case
def hard_affinity_to_a_missing_node_fails():
    s = NodeAffinitySchedulingStrategy(node_id=GONE, soft=False)
    e = raised(ray.get, where.options(scheduling_strategy=s).remote(), timeout=60)
    out(type(e).__name__)


@case
def node_affinity_arguments():
    bad = raised(NodeAffinitySchedulingStrategy, "not a node!", soft=False)
    spill = raised(NodeAffinitySchedulingStrategy, _node(), soft=False, _spill_on_unavailable=True)
    fail = raised(NodeAffinitySchedulingStrategy, _node(), soft=True, _fail_on_unavailable=True)
    missing = raised(NodeAffinitySchedulingStrategy, _node())
    ok = NodeAffinitySchedulingStrategy(_node(), soft=True, _spill_on_unavailable=True)
    out(type(bad).__name__, str(bad).startswith("Invalid node_id 'not a node!'. Node ID must be a valid hex string."),
        type(spill).__name__, str(spill), type(fail).__name__, str(fail), type(missing).__name__,
        ok._spill_on_unavailable, ok._fail_on_unavailable)


@case
def node_labels_select_nodes():
    node = _node()
    strategies = [
        NodeLabelSchedulingStrategy({"ray.io/node-id": In(node)}),
        NodeLabelSchedulingStrategy({"ray.io/node-id": In(node, "other")}),
        NodeLabelSchedulingStrategy({"ray.io/node-id": NotIn("other")}),
        NodeLabelSchedulingStrategy({"ray.io/node-id": Exists()}),
        NodeLabelSchedulingStrategy({"no-such-label": DoesNotExist()}),
    ]
    out([ray.get(where.options(scheduling_strategy=s).remote(), timeout=60) == node for s in strategies])


@case
def node_label_arguments():
    cases = [
        lambda: In(),
        lambda: NotIn("a", 1),
        lambda: NodeLabelSchedulingStrategy({}),
        lambda: NodeLabelSchedulingStrategy(["a"]),
        lambda: NodeLabelSchedulingStrategy({1: In("a")}),
        lambda: NodeLabelSchedulingStrategy({"a": "b"}),
        lambda: NodeLabelSchedulingStrategy(None, soft={"a": 3}),
    ]
    for make in cases:
        e = raised(make)
        text = str(e)
        # Ray's messages quote values by their repr ("... of type <class 'int'>."), which both keep.
        out(type(e).__name__, text)


@case
def label_operators_hold_their_values():
    s = NodeLabelSchedulingStrategy({"a": In("x", "y"), "b": NotIn("z")}, soft={"c": Exists()})
    out([(e.key, type(e.operator).__name__, getattr(e.operator, "values", None)) for e in s.hard],
        [(e.key, type(e.operator).__name__) for e in s.soft])


@case
def a_bad_strategy_type():
    e = raised(lambda: where.options(scheduling_strategy=3))
    out(type(e).__name__)


@case
def soft_node_labels_are_preferred_not_required():
    node = _node()
    preferred = NodeLabelSchedulingStrategy({"ray.io/node-id": Exists()}, soft={"ray.io/node-id": In(node)})
    unmet = NodeLabelSchedulingStrategy({"ray.io/node-id": Exists()}, soft={"no-such-label": Exists()})
    out(ray.get(where.options(scheduling_strategy=preferred).remote(), timeout=60) == node,
        ray.get(where.options(scheduling_strategy=unmet).remote(), timeout=60) == node)
