"""Network partitions (`torus up --netns`: every simulated host in a network namespace of its own, joined to the
head's bridge by a veth pair; `torus node cut|heal NAME` takes a host's link down and up). A cut host is DEAD and its
slice DEGRADED after the node timeout; a gang on it restarts on the other slice; after the heal the host registers
again and its stale worker is stopped, so no rank is left with two live copies. A head cut from every agent past the
node timeout marks them DEAD and takes them back when the links heal. Needs root and iproute2."""

import os
from pathlib import Path

import pytest

from conftest import REPO, can_make_namespaces, node, pid_alive, slice_of, wait_until
from test_gang_runs import PYTHON, TORCH_ARGS, TRAIN_TORCH, V6E_4X4, final_loss, finish, run_status, run_view, \
    start_train, train_ok

SPEC = REPO / "tests" / "integration" / "specs" / "two_v6e.yaml"
FAST = ("--node-timeout-ms", "1500")


pytestmark = pytest.mark.skipif(not can_make_namespaces(),
                                reason="network namespaces need root and iproute2 (ip netns add)")


def rank_processes(run_id):
    """{(attempt, rank): [pid, ...]} of the live processes of run `run_id` (found by their environment)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = dict(v.split(b"=", 1) for v in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                           if b"=" in v)
        except OSError:
            continue
        if environ.get(b"TORUS_RUN_ID") == run_id.encode() and pid_alive(int(entry)):
            key = (int(environ[b"TORUS_ATTEMPT"]), int(environ[b"TORUS_RANK"]))
            found.setdefault(key, []).append(int(entry))
    return found


def incarnation(torus, name):
    return node(torus.status(), name)["incarnation"]


def test_a_cut_host_is_dead_its_slice_degraded_and_it_rejoins_when_healed(torus):
    torus.up("--netns", *FAST, spec=SPEC)
    namespaces = (torus.session / "netns").read_text()
    assert "host v6e-0-w1 torus" in namespaces, namespaces
    before = incarnation(torus, "v6e-0-w1")

    torus.ok("node", "cut", "v6e-0-w1")
    status = wait_until(lambda: (lambda s: s if node(s, "v6e-0-w1")["state"] == "DEAD" else None)(
        torus.status()), 20, message="the cut host to be DEAD")
    assert slice_of(status, "v6e-0")["state"] == "DEGRADED"
    assert slice_of(status, "v6e-1")["state"] == "READY"
    assert status["nodes_alive"] == 8  # every other host, and the head's

    torus.ok("node", "heal", "v6e-0-w1")
    status = wait_until(lambda: (lambda s: s if slice_of(s, "v6e-0")["state"] == "READY" else None)(
        torus.status()), 20, message="the healed host to register again")
    assert node(status, "v6e-0-w1")["state"] == "ALIVE"
    assert incarnation(torus, "v6e-0-w1") != before  # a new incarnation: what it held before is fenced off


def test_a_gang_on_a_cut_host_restarts_on_the_other_slice_and_the_stale_rank_is_stopped_on_heal(torus, tmp_path):
    torus.up("--netns", *FAST, spec=SPEC)
    slow = [a if a != "0.05" else "0.2" for a in TORCH_ARGS]
    expected = final_loss(train_ok(torus, tmp_path, *V6E_4X4, "--name", "undisturbed",
                                   command=[PYTHON, TRAIN_TORCH, *TORCH_ARGS]).stdout)
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "cut", "--max-failures", "2",
                       command=[PYTHON, TRAIN_TORCH, *slow])
    try:
        run = wait_until(lambda: (v := run_view(torus, "cut")) and v["checkpoints"] and v, 90,
                         message="a committed checkpoint")
        cut = run["attempts"][0]["ranks"][1]["node_id"]
        first_slice = cut.rsplit("-w", 1)[0]
        torus.ok("node", "cut", cut)
        # The gang restarts on the other slice; meanwhile rank 1 of attempt 1 lives on, cut off, on the cut host.
        second = wait_until(lambda: (lambda v: v if v["attempt"] == 2 and v["status"] == "RUNNING" else None)(
            run_view(torus, "cut")), 60, message="the second attempt")
        assert all(not r["node_id"].startswith(first_slice) for r in second["attempts"][1]["ranks"]), second
        assert rank_processes(run["run_id"]).get((1, 1)), "the cut host's rank was expected to live on, cut off"
        torus.ok("node", "heal", cut)
        # Once the host registers again, the head tells it to drop what it held: the stale rank is stopped.
        wait_until(lambda: not any(a == 1 for a, _ in rank_processes(run["run_id"])), 30,
                   message="attempt 1's ranks to be stopped")
        code, out, err = finish(proc, 240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    after = run_status(torus, "cut")
    assert after["status"] == "SUCCEEDED" and after["failures"] == 1, after["attempts"]
    first = after["attempts"][0]
    assert first["cause"] == "host_lost" and first["end_reason"].startswith(f"host {cut} lost"), first
    assert final_loss(out) == expected


def test_a_head_cut_from_every_agent_marks_them_dead_and_takes_them_back_when_healed(torus):
    torus.up("--netns", *FAST, spec=SPEC)
    hosts = [n["node_id"] for n in torus.status()["nodes"] if n["node_id"] != "head"]
    assert len(hosts) == 8
    torus.ok("slice", "reserve", *V6E_4X4, "--name", "held", "--wait", "30")
    for h in hosts:
        torus.ok("node", "cut", h)
    status = wait_until(lambda: (lambda s: s if s["nodes_alive"] == 1 else None)(torus.status()), 20,
                        message="every cut host to be DEAD")
    assert [slice_of(status, s)["hosts_alive"] for s in ("v6e-0", "v6e-1")] == [0, 0]
    for h in hosts:
        torus.ok("node", "heal", h)
    status = wait_until(lambda: (lambda s: s if s["nodes_alive"] == 9 else None)(torus.status()), 30,
                        message="every host to register again")
    assert [slice_of(status, s)["hosts_alive"] for s in ("v6e-0", "v6e-1")] == [4, 4]
    # The reservation that lost its hosts is placed again, and the other slice takes new work.
    wait_until(lambda: '"CREATED"' in torus.ok("pg", "get", "held", "--json").stdout, 30,
               message="the reservation to be placed again")
    torus.ok("slice", "reserve", *V6E_4X4, "--name", "after", "--wait", "30")


def test_a_leader_cut_off_from_etcd_and_agents_steps_down_and_the_standby_leads(torus):
    """`torus up --ha --netns`: each head in a namespace of its own too. The leader's link is cut: the standby takes
    the journal once the lease runs out, agents follow it, and the old leader, unable to renew its lease or reach
    any etcd member, stops (it writes nothing more); healed and restarted, it stands by."""
    from test_ha import standing_by
    from test_head_restart import groups

    def serves(name):
        log = (torus.session / "logs" / f"{name}.log").read_text()
        return pid_alive(torus.pid_of(name, role="head")) and log.rfind("listening on") > log.rfind("standing by:")

    torus.up("--ha", "--netns", *FAST, spec=SPEC)
    assert serves("head-a") and standing_by(torus, "head-b")
    old = torus.pid_of("head-a", role="head")
    torus.ok("pg", "create", "--bundles", '[{"CPU": 0.1}]', "--name", "before")

    torus.ok("node", "cut", "head-a")
    wait_until(lambda: serves("head-b"), 30, message="the standby to lead")
    wait_until(lambda: not pid_alive(old), 60, message="the cut-off leader to step down")
    assert "this head no longer holds the journal at etcd://" in \
        (torus.session / "logs" / "head-a.log").read_text()
    wait_until(lambda: torus.status()["nodes_alive"] == 9, 60, message="every agent to follow the new leader")
    torus.ok("pg", "create", "--bundles", '[{"CPU": 0.1}]', "--name", "after")
    assert {"before", "after"} <= {g["name"] for g in groups(torus)}

    torus.ok("node", "heal", "head-a")
    torus.ok("head", "restart")
    wait_until(lambda: standing_by(torus, "head-a"), 20, message="the old leader to stand by")
    assert serves("head-b")
