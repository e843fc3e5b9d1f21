"""Shared fixtures for the torus integration tests.

Every test gets its own TORUS_TEMP_DIR, so sessions, tokens and logs never mix with another test's or with a
real cluster on this machine. Teardown stops whatever the test started: `torus down`, `torus stop`, then SIGKILL
for any recorded pid that is still alive.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin"))
EXAMPLE_SPEC = REPO / "examples" / "clusters" / "local.yaml"

# Variables that would point a CLI call at some other cluster.
_LEAKY_ENV = ("TORUS_ADDRESS", "TORUS_TOKEN", "TORUS_TEMP_DIR")


def binary(name):
    path = BIN_DIR / name
    if not path.is_file():
        pytest.fail(f"{path} is missing; build torus or set TORUS_BIN_DIR")
    return str(path)


def ephemeral_ports(binary_name, *command):
    """Flags that put every listening port of a head (gRPC and HTTP) on an ephemeral port, so tests never collide."""
    return ["--port", "0", "--dashboard-port", "0"]


def can_make_namespaces():
    """True when this process may create network namespaces (root and iproute2), as `torus up --netns` does."""
    if os.geteuid() != 0:
        return False
    probe = f"torus-probe-{os.getpid()}-{time.monotonic_ns() % 1000000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if made.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True


def wait_until(predicate, timeout, interval=0.05, message="condition"):
    """Polls predicate() until it returns something truthy, and returns that; fails the test after timeout s."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {message}; last value: {last!r}")
        time.sleep(interval)


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def is_torus_process(pid):
    """pid is alive and runs a torus binary, or the etcd of `torus up --ha` (guards against killing a recycled pid)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
            return comm.startswith("torus") or comm == "etcd"
    except OSError:
        return False


# Views over `torus status --json`.

def head_http(session):
    """(base URL, SSL context or None) of a session's head HTTP API: https checked against the session's CA when the
    head serves TLS (one off loopback does, e.g. `torus up --netns`)."""
    import ssl
    address = (Path(session) / "dashboard_address").read_text().strip()
    ca = Path(session) / "ca.crt"
    if not ca.exists():
        return f"http://{address}", None
    return f"https://{address}", ssl.create_default_context(cafile=str(ca))


def node(status, node_id):
    matches = [n for n in status["nodes"] if n["node_id"] == node_id]
    assert len(matches) == 1, f"expected one entry for node {node_id}, got {len(matches)}"
    return matches[0]


def slice_of(status, name):
    matches = [s for s in status["slices"] if s["name"] == name]
    assert len(matches) == 1, f"expected one slice {name}, got {len(matches)}"
    return matches[0]


def node_state(status, node_id):
    return node(status, node_id)["state"]


def alive_ids(status):
    return sorted(n["node_id"] for n in status["nodes"] if n["state"] == "ALIVE")


class Torus:
    """The torus CLI and daemons, confined to one TORUS_TEMP_DIR."""

    def __init__(self, root):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
        self.env["TORUS_TEMP_DIR"] = str(self.root)
        self._children = []  # daemons started directly by a test

    # Running commands.

    def run(self, *args, env=None, timeout=60, binary_name="torus"):
        """Runs a torus binary; returns the CompletedProcess whatever its exit code."""
        full_env = dict(self.env, **(env or {}))
        return subprocess.run([binary(binary_name), *map(str, args)], env=full_env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def ok(self, *args, **kwargs):
        """Runs `torus ARGS` and asserts it exits 0."""
        result = self.run(*args, **kwargs)
        assert result.returncode == 0, (
            f"torus {' '.join(map(str, args))} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result

    def up(self, *flags, spec=EXAMPLE_SPEC):
        """`torus up SPEC FLAGS` with the head on ephemeral ports, asserted to succeed."""
        return self.ok("up", spec, *ephemeral_ports("torus", "up"), *flags)

    def start_head(self, *flags):
        """`torus start --head FLAGS` with the head on ephemeral ports, asserted to succeed."""
        return self.ok("start", "--head", *ephemeral_ports("torus", "start"), *flags)

    def status(self, *flags):
        return json.loads(self.ok("status", "--json", *flags).stdout)

    def nodes(self, *flags):
        return json.loads(self.ok("nodes", "--json", *flags).stdout)

    def spawn(self, argv, log_path, env=None):
        """Starts a daemon owned by the test (stopped at teardown), with `env` added to the test's environment;
        returns its Popen."""
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([str(a) for a in argv], env=dict(self.env, **(env or {})),
                                    stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self._children.append(proc)
        return proc

    # The session layout.

    @property
    def session(self):
        return (self.root / "session_latest").resolve(strict=True)

    def sessions(self):
        return sorted(p for p in self.root.glob("session_*") if p.is_dir() and not p.is_symlink())

    @property
    def address(self):
        return (self.session / "head_address").read_text().strip()

    @property
    def token(self):
        return (self.session / "token").read_text().strip()

    def processes(self, session=None):
        """(role, name, pid) lines of one session's processes file, or of every session's."""
        records = []
        for s in [session] if session else self.sessions():
            path = Path(s) / "processes"
            if path.exists():
                for line in path.read_text().splitlines():
                    role, name, pid = line.split()
                    records.append((role, name, int(pid)))
        return records

    def pid_of(self, name, role="node"):
        """The latest recorded pid of the daemon `name` in the latest session."""
        pids = [pid for r, n, pid in self.processes(self.session) if r == role and n == name]
        assert pids, f"no {role} named {name} in {self.session}/processes"
        return pids[-1]

    def record_process(self, role, name, pid):
        with open(self.session / "processes", "a") as f:
            f.write(f"{role} {name} {pid}\n")

    # Teardown.

    def cleanup(self):
        recorded = lambda: [pid for _, _, pid in self.processes()] + [p.pid for p in self._children]
        # A stopped process would sit out the CLI's whole grace period.
        for pid in recorded():
            if is_torus_process(pid):
                os.kill(pid, signal.SIGCONT)
        for command in ("down", "stop"):
            try:
                self.run(command, timeout=30)
            except (subprocess.TimeoutExpired, OSError):
                pass  # the SIGKILL sweep below still runs
        for pid in recorded():
            if is_torus_process(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self._children:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # Network namespaces and bridges of `torus up --netns` that `torus down` did not get to remove.
        for session in self.sessions():
            recorded = Path(session) / "netns"
            if not recorded.exists():
                continue
            for words in (line.split() for line in recorded.read_text().splitlines()):
                if len(words) == 4 and words[0] == "host":
                    subprocess.run(["ip", "netns", "del", words[2]], capture_output=True)
                    subprocess.run(["rm", "-rf", f"/etc/netns/{words[2]}"], capture_output=True)
                elif len(words) == 3 and words[0] == "bridge":
                    subprocess.run(["ip", "link", "del", words[1]], capture_output=True)


@pytest.fixture
def torus(tmp_path):
    """A fresh TORUS_TEMP_DIR for this test; everything started in it is stopped afterwards."""
    t = Torus(tmp_path / "torus")
    try:
        yield t
    finally:
        t.cleanup()


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory):
    """One `torus up examples/clusters/local.yaml`, shared by tests of a module that only read from it."""
    t = Torus(tmp_path_factory.mktemp("shared") / "torus")
    try:
        t.up()
        yield t
    finally:
        t.cleanup()
