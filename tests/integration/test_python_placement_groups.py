"""torus.util.placement_group where torus is not Ray 2.60, which the differential suite cannot compare: a driver's
groups ending with it, what is refused by name, cluster-wide names, Ray's later fallback_strategy checks, and the
table of groups another driver made. Each test runs driver scripts with Debian's python3 against one
`torus start --head` (a head and one agent with 4 CPUs)."""

import json
import os
import subprocess
import textwrap

import pytest

from conftest import BIN_DIR, REPO, Torus

PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    t = Torus(tmp_path_factory.mktemp("pgs") / "torus")
    try:
        t.start_head("--num-cpus", "4")
        yield t
    finally:
        t.cleanup()


def driver(t, tmp_path, source, timeout=120):
    """Runs `source` as a driver script and returns the JSON of its last line of output."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(source))
    env = dict(t.env)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(BIN_DIR.parent / "python")] + inherited)
    proc = subprocess.run([PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path)
    assert proc.returncode == 0, f"driver exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_drivers_groups_end_with_it_unless_detached(cluster, tmp_path):
    made = driver(cluster, tmp_path, """
        import json, torus
        from torus.util import placement_group
        torus.init()
        owned = placement_group([{"CPU": 1}], name="owned")
        kept = placement_group([{"CPU": 1}], name="kept", lifetime="detached")
        print(json.dumps([owned.id.hex(), kept.id.hex(), owned.wait(30), kept.wait(30)]))
    """)
    owned, kept = made[0], made[1]
    assert made[2:] == [True, True]
    states = driver(cluster, tmp_path, """
        import json, torus
        from torus.util import get_placement_group, placement_group_table, remove_placement_group
        torus.init()
        table = placement_group_table()
        states = {k: v["state"] for k, v in table.items()}
        remove_placement_group(get_placement_group("kept"))
        print(json.dumps(states))
    """)
    assert states[owned] == "REMOVED"
    assert states[kept] == "CREATED"


def test_what_torus_cannot_honour_is_refused_naming_it(cluster, tmp_path):
    errors = driver(cluster, tmp_path, """
        import json, torus
        from torus.util import placement_group, remove_placement_group
        from torus.util.scheduling_strategies import (NodeAffinitySchedulingStrategy,
                                                      PlacementGroupSchedulingStrategy)
        torus.init()

        @torus.remote
        def f():
            return 1

        pg = placement_group([{"CPU": 1}])
        node = torus.get_runtime_context().get_node_id()
        attempts = {
            "soft_target": lambda: placement_group([{"CPU": 1}], strategy="STRICT_PACK",
                                                   _soft_target_node_id=node),
            "topology": lambda: placement_group([{"CPU": 1}], topology_strategy={"rack": "STRICT_PACK"}),
            "fail_on_unavailable": lambda: f.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node, soft=False, _fail_on_unavailable=True)).remote(),
            "selector_in_group": lambda: f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg),
                                                   label_selector={"team": "a"}).remote(),
        }
        out = {}
        for name, attempt in attempts.items():
            try:
                attempt()
                out[name] = None
            except ValueError as e:
                out[name] = str(e)
        remove_placement_group(pg)
        print(json.dumps(out))
    """)
    assert "_soft_target_node_id is not supported by torus" in errors["soft_target"]
    assert "topology_strategy {'rack': 'STRICT_PACK'} is not supported by torus" in errors["topology"]
    assert "_fail_on_unavailable=True) is not supported by torus" in errors["fail_on_unavailable"]
    assert "label_selector/accelerator_type: not supported inside a placement group" in errors["selector_in_group"]


def test_a_group_that_cannot_be_placed_takes_its_fallback_bundles(cluster, tmp_path):
    placed = driver(cluster, tmp_path, """
        import json, torus
        from torus.util import placement_group, placement_group_table, remove_placement_group
        torus.init()
        pg = placement_group([{"CPU": 1000}], fallback_strategy=[{"bundles": [{"CPU": 2000}]},
                                                                 {"bundles": [{"CPU": 1}, {"CPU": 1}]}])
        ready = pg.wait(30)
        table = placement_group_table(pg)
        remove_placement_group(pg)
        print(json.dumps([ready, table["state"], table["bundles"]]))
    """)
    # Neither the group's bundles nor the first fallback fit any node: the second fallback's two bundles are held.
    assert placed == [True, "CREATED", {"0": {"CPU": 1.0}, "1": {"CPU": 1.0}}]


def test_fallback_strategy_is_checked_as_rays_later_api(cluster, tmp_path):
    errors = driver(cluster, tmp_path, """
        import json
        from torus.util import placement_group
        out = []
        for fallback in ({"bundles": []}, [3], [{"bundle_label_selector": []}], [{"bundles": []}],
                         [{"bundles": [{"CPU": 1}], "bundle_label_selector": [{}, {}]}],
                         [{"bundles": [{"CPU": 1}], "strategy": "PACK"}]):
            try:
                placement_group([{"CPU": 1}], fallback_strategy=fallback)
            except ValueError as e:
                out.append(str(e))
        print(json.dumps(out))
    """)
    assert errors[:4] == [
        "fallback_strategy must be a list, got <class 'dict'>.",
        "fallback_strategy[0] must be a dict, got <class 'int'>.",
        "fallback_strategy[0] must contain 'bundles'.",
        "Bundles must be a non-empty list of resource dictionaries. For example: `[{\"CPU\": 1.0}, {\"GPU\": 1.0}]`. "
        "Got empty list instead.",
    ]
    assert errors[4] == "In fallback_strategy[0], length of `bundle_label_selector` must equal length of `bundles`."
    assert errors[5].startswith("fallback_strategy[0] contains invalid options: {'strategy'}.")


def test_group_names_are_unique_in_the_cluster(cluster, tmp_path):
    result = driver(cluster, tmp_path, """
        import json, torus
        from torus.util import placement_group, remove_placement_group
        torus.init()
        first = placement_group([{"CPU": 1}], name="twice")
        try:
            placement_group([{"CPU": 1}], name="twice")
            error = None
        except ValueError as e:
            error = str(e)
        remove_placement_group(first)
        again = placement_group([{"CPU": 1}], name="twice")
        ok = again.wait(30)
        remove_placement_group(again)
        print(json.dumps([error, ok]))
    """)
    assert 'a placement group named "twice" exists' in result[0]
    assert result[1] is True


def test_table_of_groups_another_driver_made(cluster, tmp_path):
    driver(cluster, tmp_path, """
        import json, torus
        from torus.util import placement_group
        torus.init()
        placed = placement_group([{"CPU": 1}, {"CPU": 0.5}], strategy="STRICT_PACK", name="other",
                                 lifetime="detached")
        placement_group([{"CPU": 1000}], strategy="SPREAD", name="waiting", lifetime="detached")
        print(json.dumps(placed.wait(30)))
    """)
    rows = driver(cluster, tmp_path, """
        import json, torus
        from torus.util import get_placement_group, placement_group_table, remove_placement_group
        torus.init()
        out = {}
        for name in ("other", "waiting"):
            pg = get_placement_group(name)
            row = placement_group_table(pg)
            out[name] = [pg.bundle_specs, row["strategy"], row["state"], row["bundles"],
                         row["bundles_to_node_id"], row["stats"]["scheduling_state"]]
            remove_placement_group(pg)
        out["node"] = torus.get_runtime_context().get_node_id()
        print(json.dumps(out))
    """)
    node = rows["node"]
    assert rows["other"] == [[{"CPU": 1.0}, {"CPU": 0.5}], "STRICT_PACK", "CREATED",
                             {"0": {"CPU": 1.0}, "1": {"CPU": 0.5}}, {"0": node, "1": node}, "FINISHED"]
    assert rows["waiting"][:5] == [[{"CPU": 1000.0}], "SPREAD", "PENDING", {"0": {"CPU": 1000.0}}, {"0": ""}]
