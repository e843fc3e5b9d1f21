"""The head's journal in etcd (`--state-store etcd://...`), against a real etcd (Debian's etcd-server): a head on
another machine (here: another TORUS_TEMP_DIR, so another session and state directory) brings the cluster's state
back from it, and a second head is refused while the first holds the journal."""

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import Torus, ephemeral_ports, wait_until


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd(tmp_path):
    """One etcd member on loopback ports of its own; its client endpoint "127.0.0.1:PORT". Killed by pid after."""
    assert shutil.which("etcd"), "etcd is not installed (Debian: etcd-server; scripts/setup.sh installs it)"
    client, peer = free_port(), free_port()
    endpoint = f"127.0.0.1:{client}"
    log = open(tmp_path / "etcd.log", "wb")
    proc = subprocess.Popen(
        ["etcd", "--name", "t", "--data-dir", str(tmp_path / "etcd-data"),
         "--listen-client-urls", f"http://{endpoint}", "--advertise-client-urls", f"http://{endpoint}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"t=http://127.0.0.1:{peer}"], stdout=log, stderr=log)

    def answers():
        try:
            request = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=b'{"key":"AA=="}', method="POST")
            with urllib.request.urlopen(request, timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_until(answers, 30, message="etcd to answer")
        yield endpoint
    finally:
        proc.kill()
        proc.wait()
        log.close()


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
