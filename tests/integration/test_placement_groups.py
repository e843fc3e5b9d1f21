"""Placement groups and slice groups on real processes: two-phase reservation, agents' ledgers, failover and
validation (`torus pg ...`, `torus slice reserve`, `torus node ledger`)."""

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import node, pid_alive, slice_of, wait_until

SPECS = Path(__file__).resolve().parent / "specs"
THREE_V6E = SPECS / "three_v6e.yaml"

NODE_TIMEOUT_S = 1.5
FAST = ("--node-timeout-ms", str(int(NODE_TIMEOUT_S * 1000)))
PREPARE_TTL_S = 3.0

V6E_SLICE = ("--accelerator-type", "TPU-V6E", "--topology", "4x4")
HOST_BUNDLE = {"CPU": 1, "TPU": 4}


def hosts_of(slice_name, n=4):
    return [f"{slice_name}-w{w}" for w in range(n)]


# Commands returning JSON.

def as_json(result):
    return json.loads(result.stdout)


def reserve(torus, *flags):
    """`torus slice reserve FLAGS --json`, asserted to exit 0."""
    return as_json(torus.ok("slice", "reserve", *flags, "--json"))


def create(torus, bundles, *flags):
    """`torus pg create --bundles BUNDLES FLAGS --json`, asserted to exit 0."""
    return as_json(torus.ok("pg", "create", "--bundles", json.dumps(bundles), *flags, "--json"))


def get(torus, group, *flags):
    return as_json(torus.ok("pg", "get", group, *flags, "--json"))


def ledger(torus, node_id):
    return as_json(torus.ok("node", "ledger", node_id, "--json"))


def entries(torus, node_id):
    return ledger(torus, node_id)["entries"]


def all_groups(torus):
    return as_json(torus.ok("pg", "list", "--all", "--json"))


def alive_nodes(torus):
    return sorted(n["node_id"] for n in torus.status()["nodes"] if n["state"] == "ALIVE")


# Views over a group.

def states(group):
    """The group's history as states, consecutive repeats collapsed."""
    out = []
    for event in group["history"]:
        if not out or out[-1] != event["state"]:
            out.append(event["state"])
    return out


def nodes_of(group):
    return [b["node_id"] for b in group["bundles"]]


def wait_for_group(torus, group_id, predicate, timeout, message):
    return wait_until(lambda: (lambda g: g if predicate(g) else None)(get(torus, group_id)), timeout,
                      message=message)


def assert_slice_bundles(group, slices, per_chip=False):
    """Bundles are slice-major in `slices` order, then worker id 0..3, then chip; indices run 0..n-1."""
    expected = []
    for s in slices:
        for worker in range(4):
            if per_chip:
                expected += [(s, worker, f"{s}-w{worker}", [chip], {"CPU": 1, "TPU": 1}) for chip in range(4)]
            else:
                expected.append((s, worker, f"{s}-w{worker}", [0, 1, 2, 3], HOST_BUNDLE))
    got = [(b["slice_name"], b["worker_id"], b["node_id"], b["chips"], b["resources"]) for b in group["bundles"]]
    assert got == expected
    assert [b["index"] for b in group["bundles"]] == list(range(len(expected)))


def assert_holds_slice(torus, group_id, slice_name):
    """Every host of the slice holds exactly one committed bundle of the group: all 4 chips, TPU 4."""
    for host in hosts_of(slice_name):
        held = entries(torus, host)
        assert [(e["group_id"], e["committed"], e["chips"], e["resources"]) for e in held] == [
            (f"{group_id}/{slice_name}", True, [0, 1, 2, 3], HOST_BUNDLE)], host


def assert_holds_nothing(torus, node_ids):
    for node_id in node_ids:
        assert entries(torus, node_id) == [], f"{node_id} still holds bundles"


def slice_states(status):
    return {s["name"]: (s["state"], s["reserved_by"]) for s in status["slices"]}


def wait_for_exact_slices(torus, group_id, slices, timeout):
    """Waits until the slices' hosts hold exactly the group's committed bundles (late prepares cancelled or
    expired)."""
    def exact():
        try:
            for s in slices:
                assert_holds_slice(torus, group_id, s)
        except AssertionError:
            return False
        return True
    wait_until(exact, timeout, message=f"exactly the committed bundles of {group_id} on {', '.join(slices)}")


def kill_agent(torus, name):
    pid = torus.pid_of(name)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), 5, message=f"agent {name} to exit")


# Slice groups.

def test_reserve_two_v6e_slices(torus):
    torus.up()
    group = reserve(torus, *V6E_SLICE, "--num-slices", "2", "--wait", "10")
    assert group["state"] == "CREATED"
    assert group["kind"] == "slice_group"
    assert group["reason"] == ""
    assert group["alternative"] == 0
    assert sorted(group["slices"]) == ["v6e-0", "v6e-1"]
    assert len(group["bundles"]) == 8
    assert_slice_bundles(group, group["slices"])
    assert states(group) == ["PENDING", "CREATED"]

    status = torus.status()
    assert slice_states(status) == {
        "v6e-0": ("RESERVED", group["id"]), "v6e-1": ("RESERVED", group["id"]),
        "v4-0": ("READY", ""), "v5e-0": ("READY", "")}
    assert status["pending"] == []

    v6e_hosts = hosts_of("v6e-0") + hosts_of("v6e-1")
    for s in ("v6e-0", "v6e-1"):
        assert_holds_slice(torus, group["id"], s)
    for host in v6e_hosts:
        book = ledger(torus, host)
        assert book["busy_chips"] == [0, 1, 2, 3]
        assert book["resources_available"].get("TPU", 0) == 0
        assert book["resources_available"]["CPU"] == 7
    assert_holds_nothing(torus, [n for n in alive_nodes(torus) if n not in v6e_hosts])


def test_waiting_reservation_names_holder_and_gets_freed_slice(torus):
    torus.up()
    first = reserve(torus, *V6E_SLICE, "--num-slices", "2", "--wait", "10")
    assert first["state"] == "CREATED"
    second = reserve(torus, *V6E_SLICE, "--num-slices", "1")
    assert second["state"] == "PENDING"
    expected_reason = (f"TPU-V6E 4x4 x1: 0 of 1 slices available "
                       f"(v6e-0 RESERVED by {first['id']}; v6e-1 RESERVED by {first['id']})")
    second = wait_for_group(torus, second["id"], lambda g: g["reason"] == expected_reason, 5,
                            "the second group's pending reason")
    assert second["state"] == "PENDING"
    assert second["bundles"] == [] and second["slices"] == []

    pending = torus.status()["pending"]
    assert [(g["id"], g["state"], g["reason"]) for g in pending] == [(second["id"], "PENDING", expected_reason)]
    listed = as_json(torus.ok("pg", "list", "--json"))
    assert [(g["id"], g["state"]) for g in listed] == [(first["id"], "CREATED"), (second["id"], "PENDING")]

    removed = torus.ok("pg", "remove", first["id"])
    assert removed.stdout == f"{first['id']} REMOVED\n"
    second = get(torus, second["id"], "--wait", "10")
    assert second["state"] == "CREATED"
    assert second["slices"] == ["v6e-0"]  # ties by slice name
    assert_slice_bundles(second, ["v6e-0"])
    assert states(second) == ["PENDING", "CREATED"]
    assert get(torus, first["id"])["state"] == "REMOVED"
    assert get(torus, first["id"])["bundles"] == []

    assert_holds_slice(torus, second["id"], "v6e-0")
    assert_holds_nothing(torus, [n for n in alive_nodes(torus) if n not in hosts_of("v6e-0")])
    status = torus.status()
    assert slice_states(status)["v6e-0"] == ("RESERVED", second["id"])
    assert slice_states(status)["v6e-1"] == ("READY", "")
    assert status["pending"] == []


def test_dead_host_degrades_slice_until_it_returns(torus):
    torus.up(*FAST)
    group = reserve(torus, *V6E_SLICE, "--num-slices", "2", "--wait", "10")
    assert sorted(group["slices"]) == ["v6e-0", "v6e-1"]

    kill_agent(torus, "v6e-0-w1")
    expected_reason = ("TPU-V6E 4x4 x2: 1 of 2 slices available "
                       "(keeping v6e-1; v6e-0 DEGRADED: worker 1 dead (node v6e-0-w1))")
    group = wait_for_group(torus, group["id"], lambda g: g["reason"] == expected_reason, NODE_TIMEOUT_S + 3,
                           "the group to wait for a replacement of v6e-0")
    assert group["state"] == "PENDING"
    assert states(group) == ["PENDING", "CREATED", "RESCHEDULING", "PENDING"]
    rescheduling = [e["message"] for e in group["history"] if e["state"] == "RESCHEDULING"]
    assert rescheduling == ["slice v6e-0 degraded (a host died): released whole; reserving a replacement"]
    # It keeps holding the healthy slice, and nothing on the degraded one.
    assert group["slices"] == ["v6e-1"]
    assert sorted(nodes_of(group)) == hosts_of("v6e-1")
    assert_holds_slice(torus, group["id"], "v6e-1")
    assert_holds_nothing(torus, ["v6e-0-w0", "v6e-0-w2", "v6e-0-w3"])
    status = torus.status()
    assert slice_of(status, "v6e-0")["state"] == "DEGRADED"
    assert slice_of(status, "v6e-0")["reserved_by"] == ""
    assert slice_states(status)["v6e-1"] == ("RESERVED", group["id"])
    assert [g["id"] for g in status["pending"]] == [group["id"]]

    torus.ok("node", "restart", "v6e-0-w1")
    group = get(torus, group["id"], "--wait", "10")
    assert group["state"] == "CREATED"
    assert sorted(group["slices"]) == ["v6e-0", "v6e-1"]
    assert_slice_bundles(group, group["slices"])
    assert states(group) == ["PENDING", "CREATED", "RESCHEDULING", "PENDING", "CREATED"]
    for s in ("v6e-0", "v6e-1"):
        assert_holds_slice(torus, group["id"], s)
    assert slice_states(torus.status())["v6e-0"] == ("RESERVED", group["id"])


def test_dead_host_fails_over_to_spare_slice(torus):
    torus.up(*FAST, spec=THREE_V6E)
    group = reserve(torus, *V6E_SLICE, "--num-slices", "2", "--wait", "10")
    assert group["slices"] == ["v6e-0", "v6e-1"]  # ties by slice name
    kept_before = {h: entries(torus, h) for h in hosts_of("v6e-0")}

    kill_agent(torus, "v6e-1-w2")
    group = wait_for_group(torus, group["id"], lambda g: "RESCHEDULING" in states(g) and g["state"] == "CREATED",
                           NODE_TIMEOUT_S + 3, "the group to move to the spare slice")
    assert group["slices"] == ["v6e-0", "v6e-2"]  # the kept slice first, then the replacement
    assert_slice_bundles(group, ["v6e-0", "v6e-2"])
    assert states(group) == ["PENDING", "CREATED", "RESCHEDULING", "CREATED"]
    assert group["history"][-1]["message"] == "reserved slices v6e-0, v6e-2"

    assert_holds_slice(torus, group["id"], "v6e-0")
    assert {h: entries(torus, h) for h in hosts_of("v6e-0")} == kept_before  # untouched, same attempt
    assert_holds_slice(torus, group["id"], "v6e-2")
    assert_holds_nothing(torus, ["v6e-1-w0", "v6e-1-w1", "v6e-1-w3", "cpu-0", "head"])
    status = torus.status()
    assert slice_states(status) == {"v6e-0": ("RESERVED", group["id"]), "v6e-1": ("DEGRADED", ""),
                                    "v6e-2": ("RESERVED", group["id"])}
    assert status["pending"] == []


def refusals_by(group, node_id):
    prefix = f"prepare refused by node {node_id}: Deadline Exceeded; retrying in "
    return [e for e in group["history"] if e["state"] == "PENDING" and e["message"].startswith(prefix)]


def assert_no_committed_bundles(torus, node_ids):
    for node_id in node_ids:
        assert [e for e in entries(torus, node_id) if e["committed"]] == [], node_id


def test_stopped_agent_times_out_prepare_and_leaks_nothing(torus):
    torus.up("--agent-rpc-timeout-ms", "500", "--prepare-ttl-ms", str(int(PREPARE_TTL_S * 1000)))
    stopped = "v6e-0-w1"
    pid = torus.pid_of(stopped)
    others = [n for n in alive_nodes(torus) if n != stopped]
    os.kill(pid, signal.SIGSTOP)
    try:
        group = reserve(torus, *V6E_SLICE, "--num-slices", "2")
        group = wait_for_group(torus, group["id"], lambda g: refusals_by(g, stopped), 5,
                               f"a prepare refused by {stopped}")
        assert group["state"] == "PENDING"
        assert group["bundles"] == [] and group["slices"] == []
        # Never partly created: while it waits, no other agent holds a committed bundle.
        assert_no_committed_bundles(torus, [h for h in hosts_of("v6e-0") + hosts_of("v6e-1") if h != stopped])

        # The default node timeout declares it DEAD; then no attempt is in flight and every prepare was cancelled.
        degraded = "TPU-V6E 4x4 x2: 1 of 2 slices available (v6e-0 DEGRADED: worker 1 dead (node v6e-0-w1))"
        group = wait_for_group(torus, group["id"], lambda g: g["reason"] == degraded, 10,
                               "the stopped agent to be declared dead")
        assert group["state"] == "PENDING"
        assert_holds_nothing(torus, others)
    finally:
        os.kill(pid, signal.SIGCONT)

    group = get(torus, group["id"], "--wait", "15")
    assert group["state"] == "CREATED"
    assert sorted(group["slices"]) == ["v6e-0", "v6e-1"]
    assert_slice_bundles(group, group["slices"])
    assert states(group) == ["PENDING", "CREATED"]
    # Prepares the stopped agent received late are cancelled or expire within the prepare TTL.
    wait_for_exact_slices(torus, group["id"], ["v6e-0", "v6e-1"], PREPARE_TTL_S + 3)
    assert_holds_nothing(torus, [n for n in alive_nodes(torus) if not n.startswith("v6e-")])


def test_briefly_stopped_agent_delays_reservation_only(torus):
    # "Briefly": well within the node timeout, however slow the commands of the test are.
    torus.up("--agent-rpc-timeout-ms", "500", "--prepare-ttl-ms", str(int(PREPARE_TTL_S * 1000)),
             "--node-timeout-ms", "30000")
    stopped = "v6e-1-w3"
    pid = torus.pid_of(stopped)
    incarnation = node(torus.status(), stopped)["incarnation"]
    os.kill(pid, signal.SIGSTOP)
    try:
        group = reserve(torus, *V6E_SLICE, "--num-slices", "2")
        wait_for_group(torus, group["id"], lambda g: refusals_by(g, stopped), 5, f"a prepare refused by {stopped}")
        assert_no_committed_bundles(torus, hosts_of("v6e-0") + hosts_of("v6e-1")[:3])
    finally:
        os.kill(pid, signal.SIGCONT)

    group = get(torus, group["id"], "--wait", str(PREPARE_TTL_S + 5))
    assert group["state"] == "CREATED"
    assert sorted(group["slices"]) == ["v6e-0", "v6e-1"]
    assert set(states(group)) == {"PENDING", "CREATED"}
    assert states(group)[-1] == "CREATED"
    wait_for_exact_slices(torus, group["id"], ["v6e-0", "v6e-1"], PREPARE_TTL_S + 3)
    assert node(torus.status(), stopped)["incarnation"] == incarnation, "declared dead while stopped briefly"


def test_fallback_shape_when_primary_is_held(torus):
    torus.up()
    holder = reserve(torus, *V6E_SLICE, "--num-slices", "2", "--wait", "10")
    assert holder["state"] == "CREATED"
    group = reserve(torus, *V6E_SLICE, "--fallback", "TPU-V4:2x2x2", "--wait", "10")
    assert group["state"] == "CREATED"
    assert group["alternative"] == 1
    assert group["slices"] == ["v4-0"]
    assert group["request"].startswith("TPU-V6E 4x4 x1")
    got = [(b["index"], b["slice_name"], b["worker_id"], b["node_id"], b["chips"], b["resources"])
           for b in group["bundles"]]
    assert got == [(0, "v4-0", 0, "v4-0-w0", [0, 1, 2, 3], HOST_BUNDLE),
                   (1, "v4-0", 1, "v4-0-w1", [0, 1, 2, 3], HOST_BUNDLE)]
    assert group["history"][-1]["message"] == "reserved slice v4-0 (fallback 1)"
    for host in ("v4-0-w0", "v4-0-w1"):
        assert [(e["group_id"], e["committed"], e["chips"]) for e in entries(torus, host)] == [
            (f"{group['id']}/v4-0", True, [0, 1, 2, 3])]
    assert slice_states(torus.status())["v4-0"] == ("RESERVED", group["id"])


def test_per_chip_bundles(torus):
    torus.up()
    group = reserve(torus, *V6E_SLICE, "--per-chip", "--wait", "10")
    assert group["state"] == "CREATED"
    assert group["slices"] == ["v6e-0"]
    assert len(group["bundles"]) == 16
    assert_slice_bundles(group, ["v6e-0"], per_chip=True)
    for host in hosts_of("v6e-0"):
        held = entries(torus, host)
        assert sorted((e["chips"], e["resources"]["TPU"], e["committed"]) for e in held) == [
            ([chip], 1, True) for chip in range(4)], host
        assert ledger(torus, host)["busy_chips"] == [0, 1, 2, 3]


def test_rejoined_node_holds_no_bundles_of_released_slice(torus):
    """A host declared DEAD while its agent kept running must not keep the bundles the head released."""
    torus.up(*FAST)
    group = reserve(torus, *V6E_SLICE, "--wait", "10")
    assert group["slices"] == ["v6e-0"]
    before = node(torus.status(), "v6e-0-w2")["incarnation"]

    torus.ok("node", "mark-dead", "v6e-0-w2")
    group = wait_for_group(torus, group["id"], lambda g: g["slices"] == ["v6e-1"] and g["state"] == "CREATED", 5,
                           "the group to move to v6e-1")
    wait_until(lambda: node(torus.status(), "v6e-0-w2")["incarnation"] > before, 5,
               message="v6e-0-w2 to register again")
    wait_until(lambda: entries(torus, "v6e-0-w2") == [], 3,
               message="v6e-0-w2 to drop the bundle of the slice the head released")
    assert_holds_nothing(torus, hosts_of("v6e-0"))

    torus.ok("pg", "remove", group["id"])
    again = reserve(torus, *V6E_SLICE, "--num-slices", "2", "--wait", "5")
    assert again["state"] == "CREATED"


# Ordinary placement groups.

ONE_CPU = {"CPU": 1}


def test_strict_spread_uses_distinct_nodes(torus):
    torus.up()
    group = create(torus, [ONE_CPU] * 3, "--strategy", "STRICT_SPREAD", "--wait", "10")
    assert group["state"] == "CREATED"
    assert group["kind"] == "placement_group"
    assert [b["index"] for b in group["bundles"]] == [0, 1, 2]
    assert len(set(nodes_of(group))) == 3
    for b in group["bundles"]:
        assert b["resources"] == ONE_CPU
        assert "slice_name" not in b
        assert [(e["group_id"], e["index"], e["committed"], e["resources"]) for e in entries(torus, b["node_id"])] == [
            (group["id"], b["index"], True, ONE_CPU)]


def test_strict_pack_uses_one_node(torus):
    torus.up()
    group = create(torus, [ONE_CPU] * 2, "--strategy", "STRICT_PACK", "--wait", "10")
    assert group["state"] == "CREATED"
    assert len(set(nodes_of(group))) == 1
    held = entries(torus, nodes_of(group)[0])
    assert sorted((e["group_id"], e["index"], e["committed"]) for e in held) == [
        (group["id"], 0, True), (group["id"], 1, True)]


def test_bundle_label_selector_narrows_nodes(torus):
    torus.up()
    group = create(torus, [ONE_CPU] * 4, "--strategy", "SPREAD",
                   "--bundle-label-selector", json.dumps({"torus.io/node-group": "cpu"}), "--wait", "10")
    assert group["state"] == "CREATED"
    assert sorted(nodes_of(group)) == ["cpu-0", "cpu-0", "cpu-1", "cpu-1"]

    per_bundle = [{"torus.io/node-group": "cpu"}, {"torus.io/node-id": "gpu-1"}]
    pinned = create(torus, [ONE_CPU] * 2, "--bundle-label-selector", json.dumps(per_bundle), "--wait", "10")
    assert pinned["state"] == "CREATED"
    assert nodes_of(pinned)[0] in ("cpu-0", "cpu-1")
    assert nodes_of(pinned)[1] == "gpu-1"


def test_impossible_group_pends_then_times_out(torus):
    torus.up()
    expected = ("infeasible for now: PACK 1 bundle: bundle 0 {\"CPU\": 1000}: "
                "no alive node has room for it, even with every node idle")
    waiting = create(torus, [{"CPU": 1000}])
    waiting = wait_for_group(torus, waiting["id"], lambda g: g["reason"] == expected, 5, "the infeasible reason")
    assert waiting["state"] == "PENDING"
    assert [g["id"] for g in torus.status()["pending"]] == [waiting["id"]]

    # A create that waits answers with the group as it is when the wait ends; the group goes on waiting.
    short = torus.run("pg", "create", "--bundles", '[{"CPU": 1000}]', "--wait", "0.5", "--json")
    assert short.returncode == 1
    pending = json.loads(short.stdout)
    assert pending["state"] == "PENDING"
    assert f"{pending['id']} is PENDING after 0.5 s" in short.stderr
    assert [g["id"] for g in torus.status()["pending"]] == [waiting["id"], pending["id"]]
    torus.ok("pg", "remove", pending["id"])

    result = torus.run("pg", "create", "--bundles", '[{"CPU": 1000}]', "--timeout", "1", "--wait", "5", "--json")
    assert result.returncode == 1
    failed = json.loads(result.stdout)
    assert failed["state"] == "FAILED"
    assert failed["reason"] == f"timed out after 1 s: {expected}"
    assert states(failed) == ["PENDING", "FAILED"]
    assert f"{failed['id']} is FAILED" in result.stderr
    assert [g["id"] for g in as_json(torus.ok("pg", "list", "--json"))] == [waiting["id"]]
    assert failed["id"] in [g["id"] for g in as_json(torus.ok("pg", "list", "--all", "--json"))]


def test_names_are_unique_and_removal_is_idempotent(torus):
    torus.up()
    first = create(torus, [ONE_CPU], "--name", "a", "--wait", "10")
    assert first["name"] == "a"
    clash = torus.run("pg", "create", "--bundles", '[{"CPU": 1}]', "--name", "a")
    assert clash.returncode == 2
    assert f'a placement group named "a" exists ({first["id"]})' in clash.stderr
    by_name = get(torus, "a")
    assert (by_name["id"], by_name["state"]) == (first["id"], "CREATED")

    assert torus.ok("pg", "remove", "a").stdout == f"{first['id']} REMOVED\n"
    assert torus.ok("pg", "remove", first["id"]).stdout == f"{first['id']} REMOVED\n"
    assert_holds_nothing(torus, alive_nodes(torus))
    missing = torus.run("pg", "get", "no-such-group")
    assert missing.returncode == 1
    assert "placement group no-such-group does not exist" in missing.stderr

    # A removed group's name is free again.
    second = create(torus, [ONE_CPU], "--name", "a", "--wait", "10")
    assert second["id"] != first["id"]
    assert get(torus, "a")["id"] == second["id"]


def test_pending_group_can_be_removed(torus):
    torus.up()
    waiting = create(torus, [{"CPU": 1000}])
    assert torus.ok("pg", "remove", waiting["id"]).stdout == f"{waiting['id']} REMOVED\n"
    removed = get(torus, waiting["id"])
    assert removed["state"] == "REMOVED"
    assert torus.status()["pending"] == []


def test_strict_pack_is_placed_again_whole(torus):
    torus.up(*FAST)
    cpu_nodes = json.dumps({"torus.io/node-group": "cpu"})
    group = create(torus, [ONE_CPU] * 2, "--strategy", "STRICT_PACK", "--bundle-label-selector", cpu_nodes,
                   "--wait", "10")
    victim = nodes_of(group)[0]
    assert nodes_of(group) == [victim, victim] and victim in ("cpu-0", "cpu-1")
    other = "cpu-1" if victim == "cpu-0" else "cpu-0"

    kill_agent(torus, victim)
    group = wait_for_group(torus, group["id"], lambda g: "RESCHEDULING" in states(g) and g["state"] == "CREATED",
                           NODE_TIMEOUT_S + 3, "the group to be placed again")
    assert states(group) == ["PENDING", "CREATED", "RESCHEDULING", "CREATED"]
    assert nodes_of(group) == [other, other]
    assert sorted((e["group_id"], e["index"], e["committed"]) for e in entries(torus, other)) == [
        (group["id"], 0, True), (group["id"], 1, True)]


def test_bundle_pinned_to_rejoined_node_is_placed_again(torus):
    """A node declared DEAD while its agent kept running rejoins empty: its lost bundle can go back to it."""
    torus.up(*FAST)
    group = create(torus, [ONE_CPU], "--bundle-label-selector", json.dumps({"torus.io/node-id": "cpu-0"}),
                   "--wait", "10")
    assert nodes_of(group) == ["cpu-0"]
    before = node(torus.status(), "cpu-0")["incarnation"]

    torus.ok("node", "mark-dead", "cpu-0")
    wait_until(lambda: node(torus.status(), "cpu-0")["incarnation"] > before, 5,
               message="cpu-0 to register again")
    group = as_json(torus.run("pg", "get", group["id"], "--wait", "5", "--json"))
    assert group["state"] == "CREATED", group["reason"]
    assert nodes_of(group) == ["cpu-0"]
    # It waits (PENDING) while cpu-0 is dead, and is placed again once cpu-0 is back.
    assert states(group)[:3] == ["PENDING", "CREATED", "RESCHEDULING"] and states(group)[-1] == "CREATED"
    assert set(states(group)[3:-1]) <= {"PENDING"}
    assert [(e["group_id"], e["index"], e["committed"]) for e in entries(torus, "cpu-0")] == [(group["id"], 0, True)]

    torus.ok("pg", "remove", group["id"])
    wait_until(lambda: entries(torus, "cpu-0") == [], 3, message="cpu-0 to hold nothing after the removal")


def test_lost_bundle_is_placed_again(torus):
    torus.up(*FAST)
    group = create(torus, [ONE_CPU] * 3, "--strategy", "STRICT_SPREAD", "--wait", "10")
    before = nodes_of(group)
    on_cpu = [i for i, n in enumerate(before) if n.startswith("cpu-")]
    assert on_cpu, f"no bundle on a cpu node: {before}"
    lost = on_cpu[0]
    victim = before[lost]

    kill_agent(torus, victim)
    group = wait_for_group(torus, group["id"], lambda g: "RESCHEDULING" in states(g) and g["state"] == "CREATED",
                           NODE_TIMEOUT_S + 3, "the lost bundle to be placed again")
    assert states(group) == ["PENDING", "CREATED", "RESCHEDULING", "CREATED"]
    rescheduling = [e["message"] for e in group["history"] if e["state"] == "RESCHEDULING"]
    assert rescheduling == [f"node {victim} died: bundle {lost} lost; placing again"]
    after = nodes_of(group)
    assert [n for i, n in enumerate(after) if i != lost] == [n for i, n in enumerate(before) if i != lost]
    assert after[lost] not in before, "STRICT_SPREAD must avoid the nodes the group still uses and the dead one"
    assert len(set(after)) == 3
    for b in group["bundles"]:
        assert [(e["group_id"], e["index"], e["committed"]) for e in entries(torus, b["node_id"])] == [
            (group["id"], b["index"], True)]


# Validation.

SLICE_ERRORS = [
    (("--accelerator-type", "TPU-V6E", "--topology", "3x3"),
     'primary.topology: topology "3x3" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, '
     '16x16'),
    (("--accelerator-type", "TPU-V9", "--topology", "4x4"),
     'primary.accelerator_type: accelerator type "TPU-V9" is not supported'),
    ((*V6E_SLICE, "--fallback", "TPU-V4"),
     '--fallback "TPU-V4": expected ACCELERATOR_TYPE:TOPOLOGY[:NUM_SLICES]'),
    ((*V6E_SLICE, "--fallback", "TPU-V4:2x2x2:0"),
     '--fallback "TPU-V4:2x2x2:0": expected ACCELERATOR_TYPE:TOPOLOGY[:NUM_SLICES]'),
    ((*V6E_SLICE, "--fallback", "TPU-V4:3x3x3"), 'fallbacks[0].topology: topology "3x3x3" is not valid for TPU-V4'),
    ((*V6E_SLICE, "--resources-per-bundle", '{"TPU": 0.5}'),
     "resources_per_bundle: TPU amount 0.5 is not a whole number of chips"),
]

PG_ERRORS = [
    (("--bundles", "[]"), "--bundles: must be a non-empty JSON list of bundles"),
    (("--bundles", '[{"TPU": 0.5}]'), "bundle 0: TPU amount 0.5 is not a whole number of chips"),
    (("--bundles", '[{"CPU": -1}]'), '--bundles[0]: "CPU": resource amount -1 is negative'),
    (("--bundles", "nope"), "--bundles: not valid JSON: nope"),
    (("--bundles", '[{"CPU": 1}]', "--strategy", "TIGHT"),
     'strategy: placement strategy "TIGHT" is not supported; valid: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD'),
    (("--bundles", '[{"CPU": 1}, {"CPU": 1}]', "--bundle-label-selector", '[{"team": "data"}]'),
     "--bundle-label-selector: has 1 selectors for 2 bundles"),
    (("--bundles", '[{"CPU": 1}]', "--fallback", "[1]"), '--fallback: must be an object with "bundles"'),
    (("--bundles", '[{"CPU": 1}]', "--fallback", '{"bundles": [{"CPU": 1}], "x": 1}'),
     '--fallback: unknown key "x"; accepted: bundles, bundle_label_selector'),
]


def _case_id(case):
    return " ".join(case[0])[:60]


@pytest.mark.parametrize("flags, message", SLICE_ERRORS, ids=[_case_id(c) for c in SLICE_ERRORS])
def test_slice_reserve_rejects_bad_request(local_cluster, flags, message):
    before = all_groups(local_cluster)
    result = local_cluster.run("slice", "reserve", *flags)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("torus slice reserve: ")
    assert message in result.stderr
    assert result.stdout == ""
    assert all_groups(local_cluster) == before


def test_slice_reserve_rejects_zero_slices(torus):
    torus.up()
    result = torus.run("slice", "reserve", *V6E_SLICE, "--num-slices", "0", "--json")
    assert result.returncode == 2, f"accepted --num-slices 0:\n{result.stdout}"
    assert "--num-slices: Value 0 not in range 1 to 4096" in result.stderr
    assert all_groups(torus) == []


@pytest.mark.parametrize("flags, message", PG_ERRORS, ids=[_case_id(c) for c in PG_ERRORS])
def test_pg_create_rejects_bad_request(local_cluster, flags, message):
    before = all_groups(local_cluster)
    result = local_cluster.run("pg", "create", *flags)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("torus pg create: ")
    assert message in result.stderr
    assert result.stdout == ""
    assert all_groups(local_cluster) == before
