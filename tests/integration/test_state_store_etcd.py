"""The head's journal in etcd (`--state-store etcd://...`), against a real etcd (Debian's etcd-server): a head on
another machine (here: another TORUS_TEMP_DIR, so another session and state directory) brings the cluster's state
back from it; a second head is refused while the first holds the journal, or stands by (`--standby`) and leads once
it is gone; a leader stalled past its lease steps down; agents given every head's address follow the leader."""

import json
import os
import time

import pytest

from conftest import Torus, ephemeral_ports, wait_until
from etcd_local import free_port, start_etcd


@pytest.fixture
def etcd(tmp_path):
    """One etcd member on loopback ports of its own; its client endpoint "127.0.0.1:PORT". Killed by pid after."""
    proc, endpoint = start_etcd(str(tmp_path))
    try:
        yield endpoint
    finally:
        proc.kill()
        proc.wait()


def test_a_head_on_etcd_is_alone_and_another_machine_brings_its_cluster_back(etcd, tmp_path):
    url = f"etcd://{etcd}/clusters/one"
    first = Torus(tmp_path / "machine-a")
    second = Torus(tmp_path / "machine-b")
    try:
        first.start_head("--no-local-node", "--state-store", url)
        group = json.loads(first.ok("pg", "create", "--bundles", '[{"no_such_resource": 1}]', "--name", "kept",
                                    "--json").stdout)
        assert group["state"] == "PENDING"

        # While it runs, another head on the same journal is refused, naming the holder.
        refused = second.run("start", "--head", "--no-local-node", *ephemeral_ports("torus", "start"),
                             "--state-store", url)
        assert refused.returncode != 0
        assert f"the journal at {url} is held by " in refused.stderr, refused.stderr

        first.ok("stop")  # the head gives the journal up as it stops
        second.start_head("--no-local-node", "--state-store", url)
        back = json.loads(second.ok("pg", "get", "kept", "--json").stdout)
        assert back["id"] == group["id"] and back["state"] == "PENDING"
        assert not (second.session / "state" / "journal.db").exists()  # nothing in the state directory
        second.ok("pg", "remove", "kept")
        second.ok("stop")

        # And back on the first machine: the removal is there.
        first.start_head("--no-local-node", "--state-store", url)
        gone = first.run("pg", "get", "kept", "--json")
        assert gone.returncode != 0 and "placement group kept does not exist" in gone.stderr, gone.stderr
    finally:
        first.cleanup()
        second.cleanup()


def test_a_malformed_state_store_is_refused_naming_the_form(tmp_path):
    t = Torus(tmp_path / "torus")
    try:
        result = t.run("start", "--head", "--no-local-node", *ephemeral_ports("torus", "start"),
                       "--state-store", "etcd://nohostport")
        assert result.returncode != 0
        assert ("--state-store 'etcd://nohostport': endpoint 'nohostport' is not HOST:PORT; the form is "
                "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]") in result.stderr, result.stderr
    finally:
        t.cleanup()


def test_a_standby_head_leads_once_the_leader_dies_and_a_stalled_leader_steps_down(etcd, tmp_path):
    """Two heads on one journal (`--standby`): the second serves nothing until the first is gone, then leads with
    its state; a leader stalled past its lease finds another leading when it resumes, and exits instead of writing."""
    import signal
    from conftest import binary, pid_alive

    url = f"etcd://{etcd}/clusters/ha"
    t = Torus(tmp_path / "torus")
    token = tmp_path / "token"  # one token for both heads, as a secret mounted on each would be

    def head(name):
        session = tmp_path / name
        session.mkdir()
        proc = t.spawn([binary("torus-head"), "--session-dir", session, "--port", "0", "--dashboard-port", "0",
                        "--state-store", url, "--state-store-lease-s", "2", "--standby", "--token-file", token],
                       tmp_path / f"{name}.log")
        return proc, session

    def address(session):
        path = session / "head_address"
        return path.read_text().strip() if path.exists() else None

    def torus_at(session, *args):
        return t.run(*args, "--address", address(session), "--token", token.read_text().strip())

    try:
        a, a_session = head("a")
        wait_until(lambda: address(a_session), 20, message="the first head to lead")
        b, b_session = head("b")
        created = torus_at(a_session, "pg", "create", "--bundles", '[{"no_such_resource": 1}]', "--name", "kept",
                           "--json")
        assert created.returncode == 0, created.stderr
        group = json.loads(created.stdout)
        time.sleep(1)
        assert address(b_session) is None and b.poll() is None  # standing by: not listening
        assert "standing by: the journal at " + url + " is held by " in (tmp_path / "b.log").read_text()

        os.kill(a.pid, signal.SIGKILL)
        wait_until(lambda: address(b_session), 20, message="the standby to lead")
        back = torus_at(b_session, "pg", "get", "kept", "--json")
        assert back.returncode == 0, back.stderr
        assert json.loads(back.stdout)["id"] == group["id"]

        # The leader stalls past its lease; a new head takes the journal meanwhile.
        os.kill(b.pid, signal.SIGSTOP)
        c, c_session = head("c")
        try:
            wait_until(lambda: address(c_session), 20, message="the third head to lead")
        finally:
            os.kill(b.pid, signal.SIGCONT)
        wait_until(lambda: b.poll() is not None, 20, message="the stalled leader to step down")
        assert b.returncode == 1
        assert "no longer holds the journal at " + url in (tmp_path / "b.log").read_text()
        removed = torus_at(c_session, "pg", "remove", "kept")
        assert removed.returncode == 0, removed.stderr
    finally:
        t.cleanup()


def test_an_agent_given_every_heads_address_follows_the_one_that_leads(etcd, tmp_path):
    """`torus start --address A,B`: the agent registers with the head that leads and, after that one's death, with
    its successor, which keeps it ALIVE past its node timeout."""
    import signal
    from conftest import binary

    url = f"etcd://{etcd}/clusters/follow"
    t = Torus(tmp_path / "torus")
    token = tmp_path / "token"
    ports = [free_port(), free_port()]
    addresses = ",".join(f"127.0.0.1:{p}" for p in ports)

    def head(name, port):
        session = tmp_path / name
        session.mkdir()
        proc = t.spawn([binary("torus-head"), "--session-dir", session, "--port", port, "--dashboard-port", "0",
                        "--state-store", url, "--state-store-lease-s", "2", "--standby", "--token-file", token,
                        "--node-timeout-ms", "1500"], tmp_path / f"{name}.log")
        return proc, session

    def node_state(port):
        result = t.run("status", "--json", "--address", f"127.0.0.1:{port}", "--token", token.read_text().strip())
        if result.returncode != 0:
            return None
        nodes = {n["node_id"]: n["state"] for n in json.loads(result.stdout)["nodes"]}
        return nodes.get("follower")

    try:
        a, a_session = head("a", ports[0])
        wait_until(lambda: (a_session / "head_address").exists(), 20, message="the first head to lead")
        b, _ = head("b", ports[1])
        t.ok("start", "--address", addresses, "--token", token.read_text().strip(), "--node-id", "follower",
             "--num-cpus", "1")
        assert node_state(ports[0]) == "ALIVE"

        os.kill(a.pid, signal.SIGKILL)
        wait_until(lambda: node_state(ports[1]), 20, message="the standby to lead")
        time.sleep(3)  # twice the node timeout: a node that did not come back would be DEAD by now
        assert node_state(ports[1]) == "ALIVE"
    finally:
        t.cleanup()
