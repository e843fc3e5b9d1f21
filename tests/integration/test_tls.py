"""A local cluster with TLS (`torus up --tls`, docs/security.md): agents join with the join token and talk TLS with
node certificates; a real PyTorch gang, a job, tasks and actors from a Python driver and the HTTPS API all work as on
a plaintext cluster; what crosses the loopback interface carries no token in clear text."""

import json
import os
import re
import socket
import ssl
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, can_make_namespaces, wait_until

PYTHON = "/usr/bin/python3"
SPEC = REPO / "tests" / "integration" / "specs" / "two_v6e.yaml"
TRAIN_TORCH = str(REPO / "examples" / "train_torch.py")

DRIVER = """\
import torus
torus.init()

@torus.remote
def double(x):
    return 2 * x

@torus.remote
class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
        return self.n

counter = Counter.remote()
print("tasks", torus.get([double.remote(i) for i in range(5)]))
print("actor", torus.get([counter.add.remote(k) for k in (1, 2, 3)]))
"""


@pytest.fixture
def tls_cluster(torus):
    torus.up("--tls", "--serve-port", "-1", spec=SPEC)
    return torus


def https_get(torus, path, context):
    address = (torus.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"https://{address}{path}", headers={"Authorization": f"Bearer {torus.token}"})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return json.loads(response.read())


def test_agents_join_with_node_certificates(tls_cluster):
    session = tls_cluster.session
    assert (session / "ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert oct((session / "join_token").stat().st_mode & 0o777) == "0o600"
    status = tls_cluster.status()
    assert status["nodes_alive"] == 9
    head_log = (session / "logs" / "head.log").read_text()
    assert "gRPC over TLS, node certificates required" in head_log
    for n in status["nodes"]:
        assert f"node {n['node_id']} joined: certificate issued" in head_log
    host_dir = session / "hosts" / "v6e-0-w0" / "work" / "tls"
    assert oct((host_dir / "node.key").stat().st_mode & 0o777) == "0o600"
    assert (host_dir / "node.crt").is_file()


def test_torch_gang_job_and_python_driver_over_tls(tls_cluster, tmp_path):
    torus = tls_cluster
    train = torus.run("train", "--accelerator-type", "TPU-V6E", "--topology", "4x4", "--name", "tls-gang",
                      "--storage-path", str(tmp_path / "runs"), "--", PYTHON, TRAIN_TORCH, "--steps", "10",
                      "--sleep", "0.02", "--checkpoint-every", "5", timeout=180)
    assert train.returncode == 0, f"stdout:\n{train.stdout}\nstderr:\n{train.stderr}"
    assert "[rank 0] final loss:" in train.stdout
    run = json.loads(torus.ok("train", "status", "tls-gang", "--json").stdout)
    assert run["status"] == "SUCCEEDED"
    # The workers' step reports and checkpoints reached the head over HTTPS.
    assert [c["step"] for c in run["checkpoints"]] == [5, 10]

    job = torus.run("job", "submit", "--", PYTHON, "-c", "print('job over tls')", timeout=60)
    assert job.returncode == 0, job.stderr
    assert "job over tls" in job.stdout

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = dict(torus.env, PYTHONPATH=os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([PYTHON, str(driver)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "tasks [0, 2, 4, 6, 8]" in out.stdout
    assert "actor [1, 3, 6]" in out.stdout


def test_https_api_verifies_against_the_cluster_ca(tls_cluster):
    torus = tls_cluster
    ca = ssl.create_default_context(cafile=str(torus.session / "ca.crt"))
    assert https_get(torus, "/api/v0/cluster", ca)["nodes_alive"] == 9
    # Without the CA the head's certificate is not trusted; plain HTTP gets no answer.
    with pytest.raises(urllib.error.URLError) as refused:
        https_get(torus, "/api/v0/cluster", ssl.create_default_context())
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
    address = (torus.session / "dashboard_address").read_text().strip()
    with pytest.raises((urllib.error.URLError, ConnectionError, http_client_errors())):
        urllib.request.urlopen(f"http://{address}/healthz", timeout=5)
    # The browser's login sets a Secure cookie.
    no_redirect = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ca), NoRedirect())
    with pytest.raises(urllib.error.HTTPError) as login:
        no_redirect.open(f"https://{address}/?token={torus.token}", timeout=10)
    assert login.value.code == 303
    cookie = login.value.headers["Set-Cookie"]
    assert cookie.endswith("; Path=/; HttpOnly; SameSite=Strict; Secure"), cookie


def http_client_errors():
    import http.client
    return http.client.HTTPException


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class LoopbackCapture:
    """TCP payloads to or from the given ports (every port with None) on an interface (lo by default), read from a
    raw packet socket (root only)."""

    def __init__(self, ports, interface="lo"):
        self.ports = set(ports) if ports is not None else None
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.ntohs(0x0800))
        self.sock.bind((interface, 0x0800))
        self.sock.settimeout(0.05)
        self.payload = bytearray()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while not self.stop.is_set():
            try:
                packet = self.sock.recv(70000)
            except socket.timeout:
                continue
            if len(packet) < 20 or packet[9] != 6:  # not TCP
                continue
            ip_len = (packet[0] & 0x0F) * 4
            src, dst = struct.unpack("!HH", packet[ip_len:ip_len + 4])
            if self.ports is not None and src not in self.ports and dst not in self.ports:
                continue
            tcp_len = (packet[ip_len + 12] >> 4) * 4
            self.payload += packet[ip_len + tcp_len:]

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()
        return bytes(self.payload)


def test_captured_traffic_carries_no_token_or_body_in_clear_text(tls_cluster, tmp_path):
    torus = tls_cluster
    ports = [int((torus.session / name).read_text().strip().rsplit(":", 1)[1])
             for name in ("head_address", "dashboard_address")]
    try:
        capture = LoopbackCapture(ports)
    except PermissionError:
        pytest.skip("capturing on lo needs root (CAP_NET_RAW)")
    marker = "tls-marker-5d1c"
    try:
        job = torus.run("job", "submit", "--", "/bin/echo", marker, timeout=60)
        pg = torus.run("pg", "create", "--name", marker + "-pg", "--bundles", '[{"CPU": 1}]', timeout=30)
    finally:
        seen = capture.close()
    assert job.returncode == 0 and marker in job.stdout, job.stderr
    assert pg.returncode == 0, pg.stderr
    assert len(seen) > 2000, "nothing captured"
    assert torus.token.encode() not in seen, "the token crossed in clear text"
    assert marker.encode() not in seen, "a request or its output crossed in clear text"
    assert b"Authorization" not in seen and b"/api/v0/" not in seen


MARKER_DRIVER = """\
import torus
torus.init()
MARKER = "core-marker-" + "7f3a"

@torus.remote
def echo(text):
    return text + "-back"

@torus.remote
class Keeper:
    def keep(self, text):
        self.text = text
        return self.text + "-kept"

keeper = Keeper.remote()
print(torus.get([echo.remote(MARKER + str(i)) for i in range(8)]))
print(torus.get(keeper.keep.remote(MARKER)))

# A value past the inline limit, read on another node: agent to agent over the object transfer port.
from torus.util.scheduling_strategies import NodeAffinitySchedulingStrategy
big = torus.put((MARKER * 40000).encode())
here = torus.get_runtime_context().get_node_id()
there = [n["NodeID"] for n in torus.nodes() if n["NodeID"] != here][0]

@torus.remote
def count(data):
    return data.count(MARKER.encode()), torus.get_runtime_context().get_node_id()

print("big", torus.get(count.options(scheduling_strategy=NodeAffinitySchedulingStrategy(there, soft=False))
                       .remote(big)) == (40000, there))
"""


def test_task_and_actor_calls_and_objects_between_processes_cross_loopback_encrypted(tls_cluster, tmp_path):
    """A driver's tasks and actor calls go from its own port to task workers' ports: each serves TLS with a
    certificate the head issued it ("torus-worker:..."), and a large value read on another node crosses between the
    agents' transfer ports over mutual TLS: no argument, result or object crosses in clear text."""
    torus = tls_cluster
    try:
        capture = LoopbackCapture(None)
    except PermissionError:
        pytest.skip("capturing on lo needs root (CAP_NET_RAW)")
    driver = tmp_path / "driver.py"
    driver.write_text(MARKER_DRIVER)
    env = dict(torus.env, PYTHONPATH=os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")]))
    try:
        out = subprocess.run([PYTHON, str(driver)], env=env, capture_output=True, text=True, timeout=120)
    finally:
        seen = capture.close()
    assert out.returncode == 0, out.stderr
    assert "core-marker-7f3a0-back" in out.stdout and "core-marker-7f3a-kept" in out.stdout, out.stdout
    assert "big True" in out.stdout, out.stdout
    assert len(seen) > 10000, "nothing captured"
    assert b"core-marker-7f3a" not in seen, "a task's argument or result crossed in clear text"
    assert torus.token.encode() not in seen


@pytest.mark.skipif(not can_make_namespaces(),
                    reason="network namespaces and capturing need root and iproute2 (ip netns add)")
def test_hosts_in_network_namespaces_talk_tls_by_default_and_the_bridge_carries_no_token(torus, tmp_path):
    """`torus up --netns` (no --tls: a head off loopback serves TLS by default): every simulated host has an address
    of its own behind a bridge, so agents, the head and the CLI talk as across a network; what crosses the bridge
    carries no token, no command and no output."""
    torus.up("--netns", "--serve-port", "-1", spec=SPEC)
    assert "gRPC over TLS, node certificates required" in (torus.session / "logs" / "head.log").read_text()
    head_host = torus.address.rsplit(":", 1)[0]
    bridges = [line.split()[0] for line in subprocess.run(["ip", "-br", "addr"], capture_output=True,
                                                          text=True).stdout.splitlines()
               if f" {head_host}/" in line]
    assert len(bridges) == 1, f"no interface holds {head_host}"
    ports = [int((torus.session / name).read_text().strip().rsplit(":", 1)[1])
             for name in ("head_address", "dashboard_address")]
    capture = LoopbackCapture(ports, interface=bridges[0])
    marker = "tls-bridge-marker-9b2e"
    try:
        train = torus.run("train", "--accelerator-type", "TPU-V6E", "--topology", "4x4", "--storage-path",
                          str(tmp_path / "runs"), "--", "/bin/echo", marker, timeout=120)
        time.sleep(1)  # heartbeats of every host cross too
    finally:
        seen = capture.close()
    assert train.returncode == 0, train.stderr
    assert train.stdout.count(marker) == 4, train.stdout
    assert seen.count(b"\x17\x03\x03") > 20, "no TLS records crossed the bridge"  # TLS application data
    assert torus.token.encode() not in seen, "the token crossed the bridge in clear text"
    assert marker.encode() not in seen, "a command or its output crossed the bridge in clear text"
    # TLS 1.3 encrypts the certificates too: no node's identity is readable on the wire.
    assert b"torus-node:" not in seen


def test_start_head_with_tls_and_join_a_second_agent_with_the_printed_command(torus):
    """`torus start --head --tls` prints a join command with --tls-ca and --join-token-file; an agent started with it
    joins with a certificate of its own, and later commands on that machine check the head against the CA."""
    started = torus.start_head("--tls")
    address = torus.address
    assert f"torus head started at {address} (TLS)\n" in started.stdout
    join = re.search(r"^  join:     torus start (.*)$", started.stdout, re.M)
    assert join, started.stdout
    join_args = join.group(1).split()
    assert join_args[:2] == ["--address", address] and "--tls-ca" in join_args and "--join-token-file" in join_args
    joined = torus.ok("start", *join_args, "--num-cpus", "3")
    second = re.search(r"^node (\S+) joined the cluster at ", joined.stdout, re.M).group(1)
    # The latest session is now the joining agent's: it holds the CA, so the CLI talks TLS to the head.
    assert (torus.session / "ca.crt").is_file()
    status = torus.status()
    assert status["nodes_alive"] == 2
    head_log = next(torus.root.glob("session_*/logs/head.log")).read_text()
    assert f"node {second} joined: certificate issued" in head_log


def test_two_heads_of_an_ha_cluster_share_one_ca_and_join_token_and_agents_follow_a_failover(torus):
    """`torus up --ha --tls`: both heads are given the session's tls/ca.crt, ca.key and join_token (as `torus tls
    init` writes them); after kill -9 of the leader, every agent heartbeats the standby with the certificate the
    first head issued, and a job runs; the restarted head comes back as a standby with the same CA."""
    from test_ha import FAST, fail_over, standing_by
    torus.up("--ha", "--tls", *FAST, "--serve-port", "-1", spec=SPEC)
    secrets = torus.session / "tls"
    assert oct((secrets / "ca.key").stat().st_mode & 0o777) == "0o600"
    assert (torus.session / "ca.crt").read_text() == (secrets / "ca.crt").read_text()
    assert (torus.session / "join_token").read_text() == (secrets / "join_token").read_text()
    for name in ("head-a", "head-b"):
        args = json.loads((torus.session / f"{name}.json").read_text())["args"]
        assert args[args.index("--tls-ca") + 1] == str(secrets / "ca.crt"), args
        assert args[args.index("--join-token-file") + 1] == str(secrets / "join_token"), args
    assert torus.status()["nodes_alive"] == 9
    killed, successor = fail_over(torus)
    log = (torus.session / "logs" / f"{successor}.log").read_text()
    assert "gRPC over TLS, node certificates required" in log
    time.sleep(2)  # longer than the node timeout (1.5 s): agents that could not reach the new leader would be dead
    status = torus.status()
    assert status["nodes_alive"] == 9 and status["nodes_dead"] == 0, status
    job = torus.run("job", "submit", "--", "/bin/echo", "after-failover", timeout=60)
    assert job.returncode == 0 and "after-failover" in job.stdout, job.stderr
    torus.ok("head", "restart")
    wait_until(lambda: standing_by(torus, killed), 15, message="the restarted head to stand by")


def test_an_agent_gives_its_workers_its_own_tls_mode_not_a_ca_left_in_its_environment(torus, tmp_path):
    """A plaintext agent started with TORUS_TLS_CA in its environment (another cluster's) does not hand it to its
    workers: a job's driver and its tasks talk plaintext to this plaintext cluster."""
    from conftest import binary
    torus.ok("tls", "init", tmp_path / "other")
    session = tmp_path / "plain"
    torus.spawn([binary("torus-head"), "--session-dir", session, "--port", "0", "--dashboard-port", "0",
                 "--serve-port", "-1"], tmp_path / "head.log")
    wait_until(lambda: (session / "head_address").exists(), 15, message="the head serving")
    address = (session / "head_address").read_text().strip()
    torus.spawn([binary("torus-node"), "--address", address, "--token-file", session / "token", "--node-id", "n1",
                 "--work-dir", tmp_path / "n1", "--metadata-url", "off", "--num-cpus", "2"], tmp_path / "n1.log",
                env={"TORUS_TLS_CA": str(tmp_path / "other" / "ca.crt"),
                     "PYTHONPATH": os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])})
    env = {"TORUS_ADDRESS": address, "TORUS_TOKEN": (session / "token").read_text().strip(),
           "TORUS_DASHBOARD_ADDRESS": (session / "dashboard_address").read_text().strip()}
    wait_until(lambda: torus.run("status", "--json", env=env).returncode == 0 and
               json.loads(torus.run("status", "--json", env=env).stdout)["nodes_alive"] == 1, 20,
               message="the agent registered")
    script = ("import torus; torus.init(); f = torus.remote(lambda x: x * 3); "
              "print('tripled', torus.get([f.remote(i) for i in range(4)]))")
    job = torus.run("job", "submit", "--", PYTHON, "-c", script, env=env, timeout=90)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "tripled [0, 3, 6, 9]" in job.stdout, job.stdout


def test_an_agent_without_the_ca_joining_a_tls_head_is_told_to_pass_it(torus):
    """A head off loopback serves TLS by default: an agent started the old way (token only) cannot register, and
    `torus start --address` says why (the agent's last log line) and that the agent keeps trying."""
    torus.start_head("--tls")
    address, token_file = torus.address, torus.session / "token"
    joined = torus.run("start", "--address", address, "--token-file", token_file, "--num-cpus", "1", timeout=60)
    assert joined.returncode == 1, joined.stdout
    assert "0 of 1 nodes registered within 15 s; end of " in joined.stderr, joined.stderr
    assert ("if the head serves TLS (one listening off loopback does; `torus start --head` says \"(TLS)\"), start "
            "this agent with --tls-ca and --join-token-file") in joined.stderr, joined.stderr
    assert "(the agent keeps trying in the background; `torus stop` stops it)" in joined.stderr
    torus.ok("stop")
