"""torus.util.tpu on a `torus up` cluster of one simulated v6e 4x4 slice: what only torus can show (tests/compat
compares the rest with Ray, whose simulated hosts cannot count chips). The host helpers answer the host's chips in a
worker that holds the whole host (no TPU_VISIBLE_CHIPS) and in one holding a chip; a slice group held makes the
slice busy and shutdown frees it; a driver's groups go when it exits unless detached; what a slice group cannot
hold is refused with a ValueError naming it."""

import json
import os
import subprocess
import textwrap

import pytest

from conftest import BIN_DIR, REPO, Torus, wait_until

SPEC = REPO / "tests" / "integration" / "specs" / "tasks.yaml"
PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    t = Torus(tmp_path_factory.mktemp("util_tpu") / "torus")
    try:
        t.up(spec=SPEC)
        yield t
    finally:
        t.cleanup()


def driver(t, tmp_path, source, timeout=180):
    """Runs `source` as a driver with the source tree's torus; returns the JSON its last line prints."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(source))
    env = dict(t.env, PYTHONPATH=os.pathsep.join([str(REPO / "python"), str(BIN_DIR.parent / "python")]))
    proc = subprocess.run([PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path)
    assert proc.returncode == 0, f"driver exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slice_state(t):
    return [s["state"] for s in t.status()["slices"] if s["name"] == "v6e-0"][0]


def test_host_helpers_answer_the_hosts_chips_in_whole_host_and_one_chip_workers(cluster, tmp_path):
    result = driver(cluster, tmp_path, """
        import json, os, torus
        from torus.util import tpu
        torus.init()

        @torus.remote(num_cpus=0)
        def facts():
            return (os.environ.get("TPU_VISIBLE_CHIPS"), tpu.get_num_tpu_chips_on_node(),
                    tpu.get_current_pod_worker_count(), tpu.get_current_pod_name())

        whole = torus.get(facts.options(resources={"TPU": 4}).remote())
        one = torus.get(facts.options(resources={"TPU": 1}).remote())
        here = (tpu.get_num_tpu_chips_on_node(), tpu.get_current_pod_name())
        print(json.dumps({"whole": whole, "one": one, "driver": here}))
    """)
    assert result["whole"] == [None, 4, 4, "v6e-0"], "a whole-host worker has no TPU_VISIBLE_CHIPS: the host's 4"
    visible, chips, hosts, name = result["one"]
    assert visible in {"0", "1", "2", "3"} and [chips, hosts, name] == [4, 4, "v6e-0"]
    assert result["driver"] == [0, None], "the driver's node is the head's, without TPUs"


def test_a_held_slice_is_busy_and_shutdown_frees_it(cluster, tmp_path):
    result = driver(cluster, tmp_path, """
        import json, time, torus
        from torus.util import tpu
        torus.init()
        before = tpu.get_num_ready_tpu_slices("4x4", "TPU-V6E")
        spg = tpu.SlicePlacementGroup(topology="4x4", accelerator_version="v6e", resources_per_bundle={"TPU": 2})
        held = (tpu.get_num_ready_tpu_slices("4x4", "TPU-V6E"), tpu.get_num_tpu_slices("4x4", "TPU-V6E"))
        table = spg.placement_group.table()
        bundles = [(b["worker_id"], b["chips"]) for b in table["bundles"]]
        spg.shutdown()
        deadline = time.monotonic() + 30
        while tpu.get_num_ready_tpu_slices("4x4", "TPU-V6E") != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        print(json.dumps({"before": before, "held": held, "bundles": bundles, "head_pgs": spg.head_placement_groups,
                          "after": tpu.get_num_ready_tpu_slices("4x4", "TPU-V6E")}))
    """)
    assert result["before"] == 1 and result["held"] == [0, 1] and result["after"] == 1
    # Per-chip-block bundles: by TPU worker id, then chip block.
    assert result["bundles"] == [[w, c] for w in range(4) for c in ([0, 1], [2, 3])]
    assert result["head_pgs"] == []


def test_a_drivers_slice_groups_go_when_it_exits_unless_detached(cluster, tmp_path):
    source = """
        import json, torus
        from torus.util import tpu
        torus.init()
        spg = tpu.SlicePlacementGroup(topology="4x4", accelerator_version="v6e", lifetime=LIFETIME,
                                      head_reservation_timeout_s=30)
        print(json.dumps({"id": spg.placement_group.id.binary().decode()}))
    """
    driver(cluster, tmp_path, source.replace("LIFETIME", "None"))
    wait_until(lambda: slice_state(cluster) == "READY", timeout=30,
               message="the slice of an exited driver's group (lifetime None) to be released")
    detached = driver(cluster, tmp_path, source.replace("LIFETIME", '"detached"'))
    assert slice_state(cluster) == "RESERVED", "a detached group outlives its driver"
    cluster.ok("pg", "remove", detached["id"])
    wait_until(lambda: slice_state(cluster) == "READY", timeout=30, message="the slice to be released")


def test_what_a_slice_group_cannot_hold_is_refused_naming_it(cluster, tmp_path):
    result = driver(cluster, tmp_path, """
        import json, torus
        from torus.util import tpu
        torus.init()
        errors = []
        for kw in [dict(strategy="STRICT_SPREAD", resources_per_bundle={"TPU": 1}), dict(strategy="STRICT_PACK"),
                   dict(tpu_resource_per_chip=2),
                   dict(bundle_label_selector=[{"ray.io/tpu-worker-id": str(i)} for i in range(4)])]:
            try:
                tpu.SlicePlacementGroup(topology="4x4", accelerator_version="v6e", **kw)
                errors.append(None)
            except ValueError as e:
                errors.append(str(e))
        print(json.dumps({"errors": errors, "ready": tpu.get_num_ready_tpu_slices("4x4", "TPU-V6E")}))
    """)
    strict_spread, strict_pack, per_chip, selectors = result["errors"]
    assert strict_spread.startswith("strategy: STRICT_SPREAD cannot place 4 bundles on each host")
    assert strict_pack.startswith("strategy: STRICT_PACK cannot place the bundles of 4 hosts on one node")
    assert per_chip.startswith("tpu_resource_per_chip=2: torus counts TPU in whole chips")
    assert selectors.startswith("bundle_label_selector: torus reserves a slice group with one label selector")
    assert result["ready"] == 1, "a refused request holds nothing"
