"""`torus start` / `stop` / `down`, graceful agent exit, and input the CLI must refuse before starting anything."""

import os
import re
import signal

import pytest

from conftest import EXAMPLE_SPEC, ephemeral_ports, node, pid_alive, wait_until

ONE_HOST_SPEC = "head:\n  num_cpus: 2\n  memory: 4Gi\nnode_groups: []\n"


def write_spec(tmp_path, text):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def joined_node_id(stdout):
    match = re.search(r"^node (\S+) joined the cluster at (\S+)$", stdout, re.M)
    assert match, stdout
    return match.group(1)


def assert_nothing_started(torus):
    assert torus.processes() == [], "a refused command recorded daemons"


# Bad input: exit 2, a message naming the culprit, and nothing started.

@pytest.mark.parametrize("labels, culprit", [
    ("a=b,bad key=x", '"bad key"'),
    ("torus.io/tpu-worker-id=3", '"torus.io/tpu-worker-id" is reserved'),
], ids=["bad-key", "reserved-key"])
def test_start_refuses_bad_labels(torus, labels, culprit):
    result = torus.run("start", "--head", *ephemeral_ports("torus", "start"), "--labels", labels)
    assert result.returncode == 2
    assert result.stderr.startswith("torus start: --labels: ")
    assert culprit in result.stderr
    assert_nothing_started(torus)


def test_start_refuses_builtin_resource_in_resources(torus):
    result = torus.run("start", "--head", *ephemeral_ports("torus", "start"), "--resources", '{"CPU": 2}')
    assert result.returncode == 2
    assert '--resources: "CPU" is set by --num-cpus' in result.stderr
    assert_nothing_started(torus)


def test_up_refuses_invalid_topology(torus, tmp_path):
    spec = write_spec(tmp_path, "node_groups:\n  - name: v6e\n    tpu: {pod_type: v6e-16, topology: 4x5}\n")
    result = torus.run("up", spec, *ephemeral_ports("torus", "up"))
    assert result.returncode == 2
    assert "node_groups[0].tpu.topology" in result.stderr
    assert '"4x5"' in result.stderr
    assert_nothing_started(torus)


def test_agent_refuses_malformed_labels(torus):
    result = torus.run("--address", "127.0.0.1:1", "--token", "t", "--labels", "novalue",
                       binary_name="torus-node", timeout=20)
    assert result.returncode == 2
    assert "torus-node: --labels: " in result.stderr
    assert '"novalue"' in result.stderr


# torus start / stop.

def test_start_head_and_join_second_agent(torus):
    started = torus.start_head("--labels", "team=ml", "--resources", '{"special": 2}')
    head_node = joined_node_id(started.stdout)
    head_session = torus.session
    address = torus.address
    token = torus.token
    assert f"torus head started at {address} (plaintext)\n" in started.stdout
    assert oct((head_session / "token").stat().st_mode & 0o777) == "0o600"
    first = node(torus.status(), head_node)
    local_cpus = first["resources_total"]["CPU"]

    joined = torus.ok("start", "--address", address, "--token-file", head_session / "token", "--num-cpus", "3")
    second_node = joined_node_id(joined.stdout)
    assert second_node != head_node

    status = torus.status("--address", address, "--token", token)
    assert sorted(n["node_id"] for n in status["nodes"]) == sorted([head_node, second_node])
    assert status["nodes_alive"] == 2
    assert node(status, second_node)["resources_total"]["CPU"] == 3
    assert status["resources_total"]["CPU"] == local_cpus + 3
    assert first["labels"]["team"] == "ml"
    assert first["resources_total"]["special"] == 2
    assert status["resources_total"]["special"] == 2
    assert "team" not in node(status, second_node)["labels"]

    pids = [pid for _, _, pid in torus.processes()]
    assert len(pids) == 3 and all(pid_alive(pid) for pid in pids)
    stopped = torus.ok("stop")
    assert stopped.stdout == "stopped 3 torus processes\n"
    assert not any(pid_alive(pid) for pid in pids)


@pytest.mark.parametrize("how", ["--token", "--token-file"])
def test_status_works_on_the_joining_machine(torus, how):
    # Joining records a session with the head's address; `torus status` there must reach the head whichever way
    # the token was given.
    torus.start_head()
    token_file = torus.session / "token"
    given = torus.token if how == "--token" else token_file
    torus.ok("start", "--address", torus.address, how, given, "--num-cpus", "1")
    result = torus.run("status", "--json")
    assert result.returncode == 0, f"torus status after joining with {how}: {result.stderr}"
    assert '"nodes_alive": 2' in result.stdout


@pytest.mark.parametrize("token_flags, message", [
    ((), "joining needs the cluster token: --token, --token-file or TORUS_TOKEN"),
    (("--token-file", "/nonexistent/token"), "cannot read token file /nonexistent/token"),
], ids=["no-token", "missing-token-file"])
def test_refused_join_leaves_the_running_cluster_in_reach(torus, token_flags, message):
    torus.start_head("--num-cpus", "1")
    head_session = torus.session
    result = torus.run("start", "--address", torus.address, *token_flags, "--num-cpus", "1")
    assert result.returncode == 2
    assert message in result.stderr
    # A refused command must leave the latest session alone: `torus status` and `torus down` still reach the head.
    status = torus.run("status", "--json")
    assert status.returncode == 0, f"torus status after a refused join: {status.stderr}"
    assert '"nodes_alive": 1' in status.stdout
    pids = [pid for _, _, pid in torus.processes(head_session)]
    torus.ok("down")
    assert not any(pid_alive(pid) for pid in pids), "torus down left the head's processes running"


# Graceful exits.

def test_stopped_agent_unregisters_at_once(torus, tmp_path):
    torus.up(spec=write_spec(tmp_path, ONE_HOST_SPEC))
    status = torus.status()
    assert [n["node_id"] for n in status["nodes"]] == ["head"]
    assert status["slices"] == []
    pid = torus.pid_of("head")

    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not pid_alive(pid), 5, message="the agent to exit")
    # The default node timeout is 3 s: DEAD right away can only come from the agent unregistering.
    gone = node(torus.status(), "head")
    assert gone["state"] == "DEAD"
    assert gone["death_reason"] == "unregistered: agent stopped"


def test_down_stops_every_process_and_agents_unregister(torus):
    torus.up()
    session = torus.session
    pids = [pid for _, _, pid in torus.processes()]
    roles = [role for role, _, _ in torus.processes()]
    # The head, 16 agents, and a libtpu metrics simulator for each of the 11 simulated TPU hosts.
    assert (roles.count("head"), roles.count("node"), roles.count("sim")) == (1, 16, 11)
    result = torus.ok("down")
    assert result.stdout == f"stopped 28 torus processes of {session}\n"
    assert not any(pid_alive(pid) for pid in pids)
    head_log = (session / "logs" / "head.log").read_text()
    for role, name, _ in torus.processes():
        if role == "node":
            assert f"node {name} unregistered: agent stopped" in head_log
    assert "no heartbeat" not in head_log
    again = torus.ok("down")
    assert again.stdout == f"stopped 0 torus processes of {session}\n"


def test_up_refuses_while_a_cluster_runs(torus):
    torus.up()
    session = torus.session
    result = torus.run("up", EXAMPLE_SPEC, *ephemeral_ports("torus", "up"))
    assert result.returncode == 1
    assert f"a cluster is already running in {session}" in result.stderr
    assert torus.session == session
