"""The autoscaler on a local cluster whose TPU pool starts empty (`torus up` with node_types): whole slices launched
for waiting groups and gang runs as simulated hosts, capacity classes that stock out or are refused falling back to
the next, idle slices removed whole, and what the autoscaler does shown in pending reasons, REST and `torus status`."""

import json
import os
import signal
import urllib.request

from conftest import is_torus_process, pid_alive, wait_until

V6E_SLICE = ("--accelerator-type", "TPU-V6E", "--topology", "4x4")


def spec(tmp_path, classes="[on-demand]", simulate="{}", max_slices=4, idle_timeout_s=600, backoff_s=300):
    path = tmp_path / "autoscaled.yaml"
    path.write_text(f"""
head: {{num_cpus: 2, memory: 4Gi}}
autoscaler: {{failure_backoff_s: {backoff_s}}}
node_types:
  - name: v6e
    tpu: {{pod_type: v6e-16, topology: 4x4}}
    num_cpus: 4
    memory: 4Gi
    max_slices: {max_slices}
    idle_timeout_s: {idle_timeout_s}
    capacity_classes: {classes}
    simulate: {simulate}
""")
    return path


def autoscaler(torus):
    address = (torus.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}/api/v0/autoscaler",
                                     headers={"Authorization": f"Bearer {torus.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def reserve(torus, *flags):
    return json.loads(torus.ok("slice", "reserve", *V6E_SLICE, *flags, "--json", timeout=120).stdout)


def group(torus, name):
    return json.loads(torus.ok("pg", "get", name, "--json").stdout)


def tpu_nodes(status):
    return [n for n in status["nodes"] if n["labels"].get("torus.io/node-group") == "v6e"]


def test_slice_reserve_on_an_empty_pool_launches_whole_slices_and_the_group_is_created(torus, tmp_path):
    torus.up(spec=spec(tmp_path))
    status = torus.status()
    assert tpu_nodes(status) == [] and status["slices"] == [], "the TPU pool starts empty"

    g = reserve(torus, "--num-slices", "2", "--name", "two", "--wait", "60")
    assert g["state"] == "CREATED", g
    slices = sorted({b["slice_name"] for b in g["bundles"]})
    assert len(slices) == 2 and all(s.startswith("v6e-") for s in slices), slices

    status = torus.status()
    hosts = tpu_nodes(status)
    assert len(hosts) == 8, "two slices of 4 hosts each"
    for h in hosts:
        # The hosts went through TPU detection: the labels come from the environment GKE gives a TPU pod.
        labels = h["labels"]
        assert labels["torus.io/tpu-slice-name"] in slices
        assert labels["torus.io/tpu-pod-type"] == "v6e-16"
        assert labels["torus.io/tpu-topology"] == "4x4"
        assert labels["torus.io/market-type"] == "on-demand"
        assert h["resources_total"]["TPU"] == 4 and h["state"] == "ALIVE"
    assert sorted(s["name"] for s in status["slices"]) == slices
    assert all(s["state"] == "RESERVED" and s["hosts_alive"] == 4 for s in status["slices"])

    a = autoscaler(torus)
    assert sorted(s["name"] for s in a["slices"]) == slices
    assert all(s["phase"] == "RUNNING" and s["capacity_class"] == "on-demand" for s in a["slices"])
    launches = [e for e in a["events"] if e["kind"] == "launch"]
    assert sorted(e["slice"] for e in launches) == slices
    assert all(e["message"] == "for group two" for e in launches)
    history = " | ".join(h["message"] for h in group(torus, "two")["history"])
    assert f"autoscaler: launching slices {launches[0]['slice']}, {launches[1]['slice']} (TPU-V6E 4x4, on-demand)" \
        in history, history

    text = torus.ok("status").stdout
    assert "Autoscaler" in text and "v6e        TPU-V6E 4x4" in text, text


def test_a_stocked_out_class_falls_back_to_the_next_after_its_provisioning_timeout(torus, tmp_path):
    torus.up(spec=spec(tmp_path, classes="[{class: spot, provisioning_timeout_s: 2}, flex-start]",
                       simulate="{spot: stockout}"))
    g = reserve(torus, "--name", "one", "--wait", "60")
    assert g["state"] == "CREATED", g

    history = [h["message"] for h in group(torus, "one")["history"]]
    launching_spot = [m for m in history if "autoscaler: launching slice" in m and "(TPU-V6E 4x4, spot)" in m]
    assert launching_spot, history
    fallback = [m for m in history if "(TPU-V6E 4x4, flex-start); spot: no capacity within 2 s" in m]
    assert fallback, "the pending reason says why flex-start is used: " + " | ".join(history)

    slice_name = g["bundles"][0]["slice_name"]
    status = torus.status()
    assert {n["labels"]["torus.io/market-type"] for n in tpu_nodes(status)} == {"flex-start"}
    a = autoscaler(torus)
    assert [(f["node_type"], f["capacity_class"], f["reason"]) for f in a["failures"]] == [
        ("v6e", "spot", "no capacity within 2 s")]
    kinds = [(e["kind"], e["capacity_class"]) for e in a["events"]]
    assert kinds[:2] == [("launch", "spot"), ("remove", "spot")], kinds
    assert ("launch", "flex-start") in kinds and ("running", "flex-start") in kinds
    assert [s["name"] for s in a["slices"]] == [slice_name]
    # The stocked-out slice never had a host.
    spot_slice = a["events"][0]["slice"]
    assert not any(n["node_id"].startswith(spot_slice) for n in status["nodes"])
    metrics = urllib.request.urlopen(urllib.request.Request(
        f"http://{(torus.session / 'dashboard_address').read_text().strip()}/metrics",
        headers={"Authorization": f"Bearer {torus.token}"}), timeout=10).read().decode()
    assert 'torus_autoscaler_launch_failures_total{node_type="v6e",capacity_class="spot"} 1' in metrics, metrics
    assert 'torus_autoscaler_slices{node_type="v6e",phase="RUNNING"} 1' in metrics


def test_a_refused_class_falls_back_at_once(torus, tmp_path):
    torus.up(spec=spec(tmp_path, classes="[spot, on-demand]", simulate="{spot: quota}"))
    g = reserve(torus, "--name", "one", "--wait", "60")
    assert g["state"] == "CREATED", g
    a = autoscaler(torus)
    refused = [e for e in a["events"] if e["kind"] == "launch-failed"]
    assert [(e["capacity_class"], e["message"]) for e in refused] == [("spot", "quota exceeded for v6e-16 spot (simulated)")]
    assert {n["labels"]["torus.io/market-type"] for n in tpu_nodes(torus.status())} == {"on-demand"}


def test_idle_slices_are_removed_whole_after_the_idle_timeout(torus, tmp_path):
    torus.up(spec=spec(tmp_path, idle_timeout_s=2))
    g = reserve(torus, "--num-slices", "2", "--name", "two", "--wait", "60")
    assert g["state"] == "CREATED", g
    agents = {name: pid for role, name, pid in torus.processes(torus.session) if role == "node" and name != "head"}
    assert len(agents) == 8
    # Held slices are not idle, however long they are held.
    wait_until(lambda: all(s["idle_since_ms"] == 0 for s in autoscaler(torus)["slices"]), 10)

    torus.ok("pg", "remove", "two")
    wait_until(lambda: autoscaler(torus)["slices"] == [], 30, message="the idle slices removed")
    removals = [e for e in autoscaler(torus)["events"] if e["kind"] == "remove"]
    assert len(removals) == 2 and all(e["message"].startswith("idle for ") for e in removals), removals
    wait_until(lambda: not any(is_torus_process(pid) for pid in agents.values()), 30, message="every host stopped")
    # Their hosts are forgotten, and the slices with them: the pool is empty again.
    wait_until(lambda: tpu_nodes(torus.status()) == [], 30, message="the removed hosts forgotten")
    assert torus.status()["slices"] == []


def test_a_gang_run_on_an_empty_pool_starts_once_its_slice_exists(torus, tmp_path):
    torus.up(spec=spec(tmp_path))
    result = torus.ok("train", *V6E_SLICE, "--", "/bin/sh", "-c", 'echo "rank $RANK of $WORLD_SIZE on $TPU_WORKER_ID"',
                      timeout=120)
    for rank in range(4):
        assert f"rank {rank} of 4 on {rank}" in result.stdout, result.stdout
    assert "SUCCEEDED" in result.stderr, result.stderr
    assert len(autoscaler(torus)["slices"]) == 1


def test_never_more_than_max_slices_and_the_reason_says_so(torus, tmp_path):
    torus.up(spec=spec(tmp_path, max_slices=1))
    result = torus.run("slice", "reserve", *V6E_SLICE, "--num-slices", "2", "--name", "two", "--wait", "3")
    assert result.returncode == 1, result.stdout + result.stderr
    g = group(torus, "two")
    assert g["state"] == "PENDING"
    assert g["reason"].endswith("autoscaler: cannot launch for it: v6e is at max_slices (1)"), g["reason"]
    assert autoscaler(torus)["slices"] == []
    assert tpu_nodes(torus.status()) == []


def test_a_restarted_head_takes_up_its_slices_and_still_removes_them_when_idle(torus, tmp_path):
    torus.up(spec=spec(tmp_path, idle_timeout_s=3))
    g = reserve(torus, "--name", "one", "--wait", "60")
    launched = [s["name"] for s in autoscaler(torus)["slices"]]
    assert launched == [g["bundles"][0]["slice_name"]]
    head = torus.pid_of("head", role="head")
    os.kill(head, signal.SIGKILL)
    wait_until(lambda: not pid_alive(head), 5, message="the head to exit")
    (torus.session / "dashboard_address").unlink()
    torus.ok("head", "restart")
    wait_until(lambda: (torus.session / "dashboard_address").exists(), 15, message="the head serving again")
    # Taken up (not launched again), running once its hosts registered with the new head; the group still holds it.
    wait_until(lambda: [(s["name"], s["phase"]) for s in autoscaler(torus)["slices"]] == [(launched[0], "RUNNING")],
               30, message="the slice taken up and running")
    assert not any(e["kind"] == "launch" for e in autoscaler(torus)["events"])
    assert group(torus, "one")["state"] == "CREATED"
    # Idle once the group is removed: removed whole, as before the restart.
    torus.ok("pg", "remove", "one")
    wait_until(lambda: autoscaler(torus)["slices"] == [], 30, message="the idle slice removed")
    wait_until(lambda: tpu_nodes(torus.status()) == [], 30, message="its hosts forgotten")


def test_a_slice_that_loses_a_host_is_replaced_whole(torus, tmp_path):
    torus.up(spec=spec(tmp_path, max_slices=1))
    g = reserve(torus, "--name", "one", "--wait", "60")
    first = g["bundles"][0]["slice_name"]
    agents = {name: pid for role, name, pid in torus.processes(torus.session) if role == "node" and name != "head"}
    os.kill(agents[f"{first}-w2"], signal.SIGKILL)  # a preempted host
    # The slice is removed whole (its other hosts stopped), and with max_slices 1 a new one can come for the group.
    wait_until(lambda: any(e["kind"] == "remove" and e["slice"] == first for e in autoscaler(torus)["events"]), 30,
               message="the broken slice removed")
    removal = [e for e in autoscaler(torus)["events"] if e["kind"] == "remove"][0]
    assert removal["message"] == f"host {first}-w2 was lost; the slice is replaced whole", removal
    wait_until(lambda: not any(is_torus_process(pid) for name, pid in agents.items()), 30,
               message="every host of the broken slice stopped")
    wait_until(lambda: (lambda x: x if x["state"] == "CREATED" and x["slices"] != [first] else None)(group(torus, "one")),
               60, message="the group placed again on a new slice")
    assert len(autoscaler(torus)["slices"]) == 1
