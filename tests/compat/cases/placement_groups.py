"""Placement groups: the examples of Ray's placement group docs (strategies, ready/wait, the table, removal, bundle
indices, named and detached groups, get_current_placement_group in tasks and actors, child task capture) and Ray's
errors for bad arguments."""

import re

import ray
from harness import case, out, raised
from ray.util.placement_group import (get_current_placement_group, get_placement_group, placement_group,
                                      placement_group_table, remove_placement_group)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

INIT = {"num_cpus": 4, "include_dashboard": False}


@ray.remote(num_cpus=1)
def current():
    pg = get_current_placement_group()
    return pg


@ray.remote(num_cpus=1)
def current_id():
    return ray.get_runtime_context().get_placement_group_id()


@case
def ready_resolves_to_the_group():
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    got = ray.get(pg.ready(), timeout=60)
    ready, _ = ray.wait([pg.ready()], timeout=60)
    out(got == pg, len(ready), pg.wait(10))
    remove_placement_group(pg)


@case
def bundle_specs_and_count():
    pg = placement_group([{"CPU": 1}, {"CPU": 2, "custom": 0}])
    out(pg.bundle_specs, pg.bundle_count, pg.is_empty)
    remove_placement_group(pg)


@case
def table_of_a_created_and_a_removed_group():
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="SPREAD", name="spread_pg")
    pg.wait(30)
    row = placement_group_table(pg)
    remove_placement_group(pg)
    removed = placement_group_table(pg)
    out(sorted(row), row["placement_group_id"] == pg.id.hex(), row["name"], row["bundles"], row["strategy"],
        row["state"], sorted(row["bundles_to_node_id"]), sorted(row["stats"]), row["stats"]["scheduling_state"],
        removed["state"])


@case
def table_of_every_group():
    pg = placement_group([{"CPU": 1}])
    pg.wait(30)
    table = placement_group_table()
    out(pg.id.hex() in table, table[pg.id.hex()]["state"])
    remove_placement_group(pg)


@case
def strategies_on_one_node():
    results = []
    for strategy in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy=strategy)
        results.append((strategy, pg.wait(5 if strategy == "STRICT_SPREAD" else 30)))
        remove_placement_group(pg)
    out(results)


@case
def a_group_too_big_stays_pending():
    pg = placement_group([{"CPU": 100}])
    out(pg.wait(1), placement_group_table(pg)["state"])
    remove_placement_group(pg)


@case
def removal_frees_the_resources():
    pg = placement_group([{"CPU": 4}])
    pg.wait(30)
    second = placement_group([{"CPU": 4}])
    blocked = second.wait(1)
    remove_placement_group(pg)
    out(blocked, second.wait(30))
    remove_placement_group(second)


@case
def tasks_run_in_bundles():
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    ray.get(pg.ready())
    inside = [ray.get(current.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote()) == pg
              for i in (0, 1, -1)]
    ids = ray.get(current_id.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote())
    outside = ray.get(current.remote())
    out(inside, ids == pg.id.hex(), outside is None, get_current_placement_group() is None,
        ray.get_runtime_context().get_placement_group_id())
    remove_placement_group(pg)


@case
def bad_bundle_indexes():
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    big = raised(lambda: current.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 5)).remote())
    low = raised(lambda: current.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, -2)).remote())
    none = raised(lambda: current.options(scheduling_strategy=PlacementGroupSchedulingStrategy(None, 1)).remote())
    out(type(big).__name__, str(big), type(low).__name__, str(low), type(none).__name__, str(none))
    remove_placement_group(pg)


@case
def no_group_means_the_default():
    out(ray.get(current.options(scheduling_strategy=PlacementGroupSchedulingStrategy(None)).remote()) is None)


@ray.remote(num_cpus=1)
class Member:
    def group(self):
        return get_current_placement_group()

    def group_id(self):
        return ray.get_runtime_context().get_placement_group_id()


@case
def actors_run_in_bundles():
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    ray.get(pg.ready())
    members = [Member.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote() for i in (0, 1)]
    out([ray.get(m.group.remote()) == pg for m in members], [ray.get(m.group_id.remote()) == pg.id.hex()
                                                             for m in members])
    for m in members:
        ray.kill(m)
    remove_placement_group(pg)


@case
def named_groups():
    pg = placement_group([{"CPU": 1}], name="named_pg")
    pg.wait(30)
    found = get_placement_group("named_pg")
    missing = raised(get_placement_group, "no_such_pg")
    empty = raised(get_placement_group, "")
    out(found == pg, found.bundle_specs, type(missing).__name__, str(missing), type(empty).__name__, str(empty))
    remove_placement_group(pg)


@case
def detached_groups():
    pg = placement_group([{"CPU": 1}], lifetime="detached", name="detached_pg")
    out(pg.wait(30), placement_group_table(pg)["name"])
    remove_placement_group(pg)


@ray.remote(num_cpus=0)
def child():
    pg = get_current_placement_group()
    return None if pg is None else pg.id.hex()


@ray.remote(num_cpus=0)
def parent():
    return ray.get(child.remote()), ray.get(child.options(scheduling_strategy="DEFAULT").remote())


@case
def children_join_the_group_when_captured():
    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready())
    captured = ray.get(parent.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_capture_child_tasks=True)).remote())
    plain = ray.get(parent.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote())
    out(captured == (pg.id.hex(), None), plain)
    remove_placement_group(pg)


@case
def bad_arguments():
    cases = [
        lambda: placement_group([{"CPU": 1}], strategy="FOO"),
        lambda: placement_group([]),
        lambda: placement_group({"CPU": 1}),
        lambda: placement_group([{"CPU": "1"}]),
        lambda: placement_group([{"CPU": 0}]),
        lambda: placement_group([{}]),
        lambda: placement_group([{"CPU": 1}], lifetime="forever"),
        lambda: placement_group([{"CPU": 1}], bundle_label_selector=[{}, {}]),
        lambda: placement_group([{"CPU": 1}], bundle_label_selector=[{"a": 1}]),
        lambda: placement_group([{"CPU": 1}], bundle_label_selector=[{"-bad-": "x"}]),
        lambda: placement_group([{"CPU": 1}], _soft_target_node_id="ab" * 28),
        lambda: placement_group([{"CPU": 1}], strategy="PACK", topology_strategy={"ray.io/node-id": "PACK"}),
        lambda: placement_group([{"CPU": 1}], topology_strategy={"ray.io/node-id": "NOPE"}),
        lambda: placement_group([{"CPU": 1}], topology_strategy={"rack": "PACK"}),
    ]
    for make in cases:
        e = raised(make)
        out(type(e).__name__, _sorted_sets(str(e)))


def _sorted_sets(text):
    """A message with its set literals ({'PACK', 'SPREAD', ...}) in sorted order: a set's order varies between
    processes."""
    return re.sub(r"\{('[A-Z_]+'(?:, '[A-Z_]+')*)\}",
                  lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", text)
