"""Failure detection and recovery: dead agents, operator mark-dead, paused agents and a restarted head."""

import os
import re
import signal
import time
import urllib.request

from conftest import binary, ephemeral_ports, node, node_state, pid_alive, slice_of, wait_until

NODE_TIMEOUT_S = 1.5
HEARTBEAT_S = 0.5  # the default heartbeat period
FAST = ("--node-timeout-ms", str(int(NODE_TIMEOUT_S * 1000)))
SLICE_NAMES = ["v4-0", "v5e-0", "v6e-0", "v6e-1"]


def slice_states(status):
    return {s["name"]: s["state"] for s in status["slices"]}


def assert_whole_cluster(status):
    """16 distinct nodes, all ALIVE, every slice READY, all 48 chips counted."""
    ids = [n["node_id"] for n in status["nodes"]]
    assert len(ids) == len(set(ids)) == 16, ids
    assert status["nodes_alive"] == 16
    assert slice_states(status) == {name: "READY" for name in SLICE_NAMES}
    assert status["resources_total"]["TPU"] == 48


def wait_for_state(torus, node_id, state, timeout):
    return wait_until(lambda: (lambda s: s if node_state(s, node_id) == state else None)(torus.status()),
                      timeout, message=f"node {node_id} to be {state}")


def wait_for_new_incarnation(torus, node_id, old_incarnation, timeout):
    def registered_again():
        s = torus.status()
        n = node(s, node_id)
        return s if n["state"] == "ALIVE" and n["incarnation"] > old_incarnation else None
    return wait_until(registered_again, timeout, message=f"node {node_id} to register again")


def test_killed_agent_times_out_and_restarts(torus):
    torus.up(*FAST)
    before = torus.status()
    assert_whole_cluster(before)
    old = node(before, "v6e-0-w1")
    pid = torus.pid_of("v6e-0-w1")
    assert old["pid"] == pid

    refused = torus.run("node", "restart", "v6e-0-w1")
    assert refused.returncode == 1
    assert f"agent v6e-0-w1 is running (pid {pid})" in refused.stderr

    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: not pid_alive(pid), 5, message="the agent to exit")
    assert node_state(torus.status(), "v6e-0-w1") == "ALIVE", "declared DEAD before the node timeout"

    dead = wait_for_state(torus, "v6e-0-w1", "DEAD", NODE_TIMEOUT_S + 2)
    elapsed = time.monotonic() - killed_at
    # Its last heartbeat may predate the kill by up to one period.
    assert elapsed >= NODE_TIMEOUT_S - HEARTBEAT_S - 0.1, f"DEAD after only {elapsed:.2f} s"
    reason = node(dead, "v6e-0-w1")["death_reason"]
    assert reason.startswith("no heartbeat for "), reason
    assert re.fullmatch(r"no heartbeat for \d+\.\d s", reason), reason
    assert float(reason.split()[3]) >= NODE_TIMEOUT_S, reason  # tenths of a second

    v6e_0 = slice_of(dead, "v6e-0")
    assert v6e_0["state"] == "DEGRADED"
    assert v6e_0["reason"] == "worker 1 dead (node v6e-0-w1)"
    assert v6e_0["hosts_alive"] == 3
    assert v6e_0["expected_hosts"] == 4
    assert [(h["worker_id"], h["state"]) for h in v6e_0["hosts"]] == [
        (0, "ALIVE"), (1, "DEAD"), (2, "ALIVE"), (3, "ALIVE")]
    assert {k: v for k, v in slice_states(dead).items() if k != "v6e-0"} == {
        "v4-0": "READY", "v5e-0": "READY", "v6e-1": "READY"}
    assert dead["resources_total"]["TPU"] == 44
    assert dead["nodes_alive"] == 15
    assert dead["nodes_dead"] == 1
    text = torus.ok("status").stdout
    assert "Nodes: 15 alive, 1 dead" in text
    assert "Dead nodes" in text and "no heartbeat for" in text

    restarted = torus.ok("node", "restart", "v6e-0-w1")
    new_pid = torus.pid_of("v6e-0-w1")
    assert new_pid != pid
    assert restarted.stdout == f"agent v6e-0-w1 started (pid {new_pid})\n"
    after = wait_for_new_incarnation(torus, "v6e-0-w1", old["incarnation"], 10)
    wait_until(lambda: torus.status()["nodes_alive"] == 16, 5, message="16 alive nodes")
    after = torus.status()
    assert_whole_cluster(after)
    back = node(after, "v6e-0-w1")
    assert back["pid"] == new_pid
    assert back["death_reason"] == ""
    assert back["labels"] == old["labels"]
    assert slice_of(after, "v6e-0")["reason"] == ""


def test_restart_of_unknown_agent_fails(torus):
    torus.up(*FAST)
    result = torus.run("node", "restart", "no-such-host")
    assert result.returncode == 2
    assert 'no agent named "no-such-host"' in result.stderr


def test_mark_dead_is_immediate_and_running_agent_rejoins(torus):
    torus.up(*FAST)
    # Agents beat by datagram from their third beat on (the first goes on the stream, the second beside a probe).
    time.sleep(4 * HEARTBEAT_S)
    before = torus.status()
    old = node(before, "v6e-1-w0")

    # The agent is held still while the DEAD state is read: running, it would rejoin at its next heartbeat, which can
    # come before a slow `torus status` reads it.
    os.kill(old["pid"], signal.SIGSTOP)
    try:
        result = torus.ok("node", "mark-dead", "v6e-1-w0")
        assert result.stdout == "node v6e-1-w0 marked DEAD\n"
        dead = torus.status()
    finally:
        os.kill(old["pid"], signal.SIGCONT)
    n = node(dead, "v6e-1-w0")
    assert n["state"] == "DEAD"
    assert n["death_reason"] == "marked dead by an operator"
    assert slice_of(dead, "v6e-1")["state"] == "DEGRADED"
    assert slice_of(dead, "v6e-1")["reason"] == "worker 0 dead (node v6e-1-w0)"
    assert dead["resources_total"]["TPU"] == 44

    # The agent is still running: its next heartbeat — a datagram, as nothing changed on its host — is answered
    # "register again" and it registers as a new incarnation.
    after = wait_for_new_incarnation(torus, "v6e-1-w0", old["incarnation"], 3 * HEARTBEAT_S + 1)
    assert node(after, "v6e-1-w0")["pid"] == old["pid"] == torus.pid_of("v6e-1-w0")
    assert_whole_cluster(after)
    log = (torus.session / "logs" / "node-v6e-1-w0.log").read_text()
    assert (f"head does not know incarnation {old['incarnation']} (answer to a heartbeat datagram); registering "
            "again") in log, log


def test_mark_dead_with_reason_and_unknown_node(torus):
    torus.up(*FAST)
    agent = torus.pid_of("cpu-0")
    os.kill(agent, signal.SIGSTOP)  # no heartbeat, and so no rejoin, until the reason is read
    try:
        result = torus.ok("node", "mark-dead", "cpu-0", "--reason", "preempted")
        assert result.stdout == "node cpu-0 marked DEAD\n"
        assert node(torus.status(), "cpu-0")["death_reason"] == "marked dead by an operator: preempted"
    finally:
        os.kill(agent, signal.SIGCONT)

    unknown = torus.run("node", "mark-dead", "nope")
    assert unknown.returncode == 1
    assert "node nope is not registered" in unknown.stderr


def test_paused_agent_dies_and_comes_back(torus):
    torus.up(*FAST)
    old = node(torus.status(), "v4-0-w1")
    pid = torus.pid_of("v4-0-w1")

    os.kill(pid, signal.SIGSTOP)
    try:
        dead = wait_for_state(torus, "v4-0-w1", "DEAD", NODE_TIMEOUT_S + 2)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert node(dead, "v4-0-w1")["death_reason"].startswith("no heartbeat for ")
    assert slice_of(dead, "v4-0")["state"] == "DEGRADED"
    assert slice_of(dead, "v4-0")["reason"] == "worker 1 dead (node v4-0-w1)"

    after = wait_for_new_incarnation(torus, "v4-0-w1", old["incarnation"], 5)
    assert node(after, "v4-0-w1")["pid"] == pid
    assert_whole_cluster(after)


def test_restarted_head_gets_every_agent_back(torus):
    torus.up(*FAST)
    before = torus.status()
    session = torus.session
    address = torus.address
    token = torus.token
    port = address.rsplit(":", 1)[1]
    agent_pids = {n["node_id"]: n["pid"] for n in before["nodes"]}

    head_pid = torus.pid_of("head", role="head")
    os.kill(head_pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(head_pid), 5, message="the head to exit")
    down = torus.run("status", "--json", timeout=30)
    assert down.returncode != 0
    assert "not reachable" in down.stderr

    (session / "head_address").unlink()
    other_ports = ephemeral_ports("torus-head")[2:]  # any further listener on a free port
    head = torus.spawn([binary("torus-head"), "--session-dir", session, "--port", port, *other_ports, *FAST],
                       torus.root / "head-restarted.log")
    torus.record_process("head", "head", head.pid)
    wait_until(lambda: (session / "head_address").exists() or head.poll() is not None, 10,
               message="the new head to listen")
    assert head.poll() is None, (torus.root / "head-restarted.log").read_text()
    assert torus.address == address
    assert torus.token == token  # reused, not regenerated

    after = wait_until(lambda: (lambda s: s if s["nodes_alive"] == 16 else None)(torus.status()), 10,
                       message="every agent to register with the new head")
    assert_whole_cluster(after)
    assert after["cluster_id"] == before["cluster_id"]
    assert {n["node_id"]: n["pid"] for n in after["nodes"]} == agent_pids
    assert all(pid_alive(pid) for pid in agent_pids.values())


def heartbeat_counts(torus):
    """The head's counters of heartbeats: {"stream": messages, "ok"/"reregister"/"refused"/"dropped": datagrams}
    (no datagram outcomes when it takes none)."""
    dashboard = (torus.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{dashboard}/metrics", headers={"Authorization": f"Bearer {torus.token}"})
    text = urllib.request.urlopen(request, timeout=10).read().decode()
    counts = {k: float(v) for k, v in re.findall(
        r'^torus_heartbeat_datagrams_total\{outcome="(\w+)"\} (\S+)$', text, re.M)}
    counts["stream"] = float(re.search(r"^torus_heartbeat_stream_messages_total (\S+)$", text, re.M).group(1))
    return counts


def test_agents_beat_by_datagram_while_nothing_changes_and_stay_alive(torus):
    torus.up(*FAST)
    before = torus.status()
    assert_whole_cluster(before)
    start = heartbeat_counts(torus)
    time.sleep(3 * NODE_TIMEOUT_S)
    after = torus.status()
    end = heartbeat_counts(torus)
    assert_whole_cluster(after)
    assert {n["node_id"]: n["incarnation"] for n in after["nodes"]} == \
        {n["node_id"]: n["incarnation"] for n in before["nodes"]}
    # 16 agents, one beat each half second: about 144 in 4.5 s, nearly all of them datagrams answered OK; the
    # streams carry only what changed (and a beat after a datagram went unanswered).
    datagrams = end["ok"] - start["ok"]
    stream = end["stream"] - start["stream"]
    assert datagrams >= 100, (start, end)
    assert stream < datagrams / 5, (start, end)
    assert end["dropped"] == end["reregister"] == end["refused"] == 0, end


def test_a_head_without_heartbeat_datagrams_keeps_agents_alive_on_their_streams(torus):
    torus.up(*FAST)
    first = {n["node_id"]: n["incarnation"] for n in torus.status()["nodes"]}
    session = torus.session
    port = torus.address.rsplit(":", 1)[1]
    head_pid = torus.pid_of("head", role="head")
    os.kill(head_pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(head_pid), 5, message="the head to exit")
    (session / "head_address").unlink()
    (session / "dashboard_address").unlink()
    other_ports = ephemeral_ports("torus-head")[2:]
    head = torus.spawn([binary("torus-head"), "--session-dir", session, "--port", port, *other_ports, *FAST,
                        "--no-heartbeat-datagrams"], torus.root / "head-no-datagrams.log")
    torus.record_process("head", "head", head.pid)
    wait_until(lambda: (session / "dashboard_address").exists() or head.poll() is not None, 10,
               message="the new head to listen")
    assert head.poll() is None, (torus.root / "head-no-datagrams.log").read_text()
    # Restored from the journal, every node is ALIVE at once; its agent registers again as a new incarnation.
    registered = wait_until(lambda: (lambda s: s if s["nodes_alive"] == 16 and all(
        n["incarnation"] != first[n["node_id"]] for n in s["nodes"]) else None)(torus.status()), 10,
        message="every agent to register with the new head")
    time.sleep(3 * NODE_TIMEOUT_S)
    after = torus.status()
    assert_whole_cluster(after)
    assert {n["node_id"]: n["incarnation"] for n in after["nodes"]} == \
        {n["node_id"]: n["incarnation"] for n in registered["nodes"]}
    counts = heartbeat_counts(torus)
    assert set(counts) == {"stream"} and counts["stream"] >= 16 * 6, counts  # every beat on the streams


def test_what_workers_started_does_not_outlive_their_agent(torus, tmp_path):
    """A worker dies with its agent (parent-death signal); what it started is killed when the agent restarts."""
    torus.up(*FAST)
    pid_file = tmp_path / "background.pid"
    # The entrypoint runs as `/bin/sh -c CMD`; the inner shell and its background sleep are the worker's descendants.
    torus.ok("job", "submit", "--no-wait", "--label-selector", '{"torus.io/node-id": "cpu-0"}', "--",
             "sh", "-c", f"sleep 300 & echo $! > {pid_file}; echo $$ >> {pid_file}; wait")
    descendants = wait_until(lambda: pid_file.exists() and len(pid_file.read_text().split()) == 2 and
                             [int(p) for p in pid_file.read_text().split()], 10, message="the job to start")
    assert all(pid_alive(p) for p in descendants)

    os.kill(torus.pid_of("cpu-0"), signal.SIGKILL)
    time.sleep(0.5)
    assert all(pid_alive(p) for p in descendants), "descendants outlive the agent until it restarts"

    torus.ok("node", "restart", "cpu-0")
    wait_until(lambda: not any(pid_alive(p) for p in descendants), 10,
               message="the restarted agent to kill what its workers left")
    wait_until(lambda: node_state(torus.status(), "cpu-0") == "ALIVE", 10, message="cpu-0 to come back")
