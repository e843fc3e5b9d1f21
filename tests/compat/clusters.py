"""Simulated TPU clusters for cases files that name one (`CLUSTER = {"accelerator": "v6e", "topology": "4x4",
"slices": 2}`): the same hosts under both systems, started before the file's cases run and stopped after.

- torus: `torus up` of a cluster spec (a head with no TPU and one node group of the slices); each TPU host is a
  torus-node whose detection reads a simulated device root and the environment GKE gives a TPU pod.
- Ray: `ray start --head`, then one `ray start --address` per TPU host with the environment Ray reads on a GKE TPU
  pod (TPU_NAME, TPU_WORKER_ID, TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY) and `--resources '{"TPU": <chips per host>}'`
  (Ray cannot count simulated chips: it globs this machine's /dev/accel*). Every port is a free one, the temp dir
  is the file's, and each `ray start` runs in a session of its own that is killed as a group at the end.

Slices are named <accelerator>-<i> and hosts are worker 0..n-1 of their slice on both systems, so cases can record
slice names. A case connects with ray.init() (INIT = {}): the harness gets RAY_ADDRESS (Ray) or TORUS_ADDRESS and
TORUS_TEMP_DIR (torus).
"""

import ast
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

HOST_CPUS = 4  # a per-chip bundle holds a CPU: 4 of them fit a 4-chip host


def cluster_of(path):
    """The CLUSTER dict of a cases file (a literal), or None."""
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CLUSTER" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def _shape(cluster):
    """(pod type, chips per host, hosts per slice) of the cluster's slices."""
    accelerator, topology = cluster["accelerator"], cluster["topology"]
    chips = 1
    for dim in topology.split("x"):
        chips *= int(dim)
    single = accelerator in ("v5litepod", "v6e") and topology in ("1x1", "2x2", "2x4")
    per_host = chips if single else 4
    cores = 1 if accelerator in ("v5litepod", "v6e") else 2
    return f"{accelerator}-{chips * cores}", per_host, chips // per_host


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TorusCluster:
    def __init__(self, cluster, root, bin_dir, env):
        self.root = Path(root)
        self.bin = Path(bin_dir)
        self.env = dict(env, TORUS_TEMP_DIR=str(self.root))
        pod_type, _, _ = _shape(cluster)
        spec = self.root / "cluster.yaml"
        spec.write_text(
            f"head: {{num_cpus: {HOST_CPUS}, memory: 2Gi}}\n"
            "node_groups:\n"
            f"  - name: {cluster['accelerator']}\n"
            f"    tpu: {{pod_type: {pod_type}, topology: {cluster['topology']}}}\n"
            f"    slices: {cluster.get('slices', 1)}\n"
            f"    num_cpus: {HOST_CPUS}\n"
            "    memory: 2Gi\n")
        try:
            self._torus("up", str(spec), "--port", "0", "--dashboard-port", "0", "--no-tpu-sim")
            self.address = (self.root / "session_latest" / "head_address").read_text().strip()
        except BaseException:
            self.stop()
            raise

    def _torus(self, *args):
        done = subprocess.run([str(self.bin / "torus"), *args], env=self.env, capture_output=True, text=True,
                              timeout=300, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"torus {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")

    def harness_env(self):
        return {"TORUS_TEMP_DIR": str(self.root), "TORUS_ADDRESS": self.address}

    def stop(self):
        try:
            self._torus("down")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass


class RayCluster:
    def __init__(self, cluster, root, ray_bin, env):
        self.root = Path(root)
        self.ray = str(ray_bin)
        # Ray's `ray start --head` turns token authentication on; the cluster is on loopback for one test file.
        self.env = dict(env, RAY_AUTH_MODE="disabled")
        self.groups = []  # process groups of the `ray start` sessions
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        try:
            self._start_all(cluster)
        except BaseException:
            self.stop()
            raise

    def _start_all(self, cluster):
        self._start(["--head", "--port", str(self.port), "--include-dashboard", "false",
                     "--dashboard-port", str(_free_port()), "--temp-dir", str(self.root)], {})
        pod_type, per_host, hosts = _shape(cluster)
        hosts_env = [{"TPU_NAME": f"{cluster['accelerator']}-{s}", "TPU_WORKER_ID": str(w),
                      "TPU_ACCELERATOR_TYPE": pod_type, "TPU_TOPOLOGY": cluster["topology"],
                      "TPU_SKIP_MDS_QUERY": "true"}
                     for s in range(cluster.get("slices", 1)) for w in range(hosts)]
        # One at a time: raylets starting together in one session directory race for its socket and log names.
        for tpu_env in hosts_env:
            self._start(["--address", self.address, "--resources", f'{{"TPU": {per_host}}}'], tpu_env)
        self._wait_for_nodes(1 + cluster.get("slices", 1) * hosts)

    def _spawn(self, args, extra_env):
        ports = ["--node-manager-port", "--object-manager-port", "--metrics-export-port",
                 "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port"]
        argv = [self.ray, "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", str(HOST_CPUS),
                "--object-store-memory", str(100 << 20),
                "--min-worker-port", "0", "--max-worker-port", "0", "--disable-usage-stats"]
        for flag in ports:
            argv += [flag, str(_free_port())]
        log = open(self.root.parent / f"ray-start-{len(self.groups)}.log", "w")
        proc = subprocess.Popen(argv, env=dict(self.env, **extra_env), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.groups.append(proc.pid)
        return proc, log

    def _start(self, args, extra_env):
        """One `ray start`; a node that timed out registering (a loaded machine) is killed and started again once."""
        for attempt in (1, 2):
            proc, log = self._spawn(args, extra_env)
            code = proc.wait(timeout=300)
            log.close()
            if code == 0:
                return
            if attempt == 2 or "--head" in args:
                raise RuntimeError(f"ray start exited {code}: {Path(log.name).read_text()[-3000:]}")
            self._kill(self.groups.pop())

    def _wait_for_nodes(self, count):
        probe = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                 "print(sum(1 for n in ray.nodes() if n['Alive']))")
        deadline = time.monotonic() + 120
        while True:
            done = subprocess.run([str(Path(self.ray).with_name("python")), "-c", probe, self.address],
                                  env=self.env, capture_output=True, text=True, timeout=120)
            if done.returncode == 0 and int(done.stdout.split()[-1]) >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster has not {count} alive nodes: {done.stdout}{done.stderr}")
            time.sleep(1)

    def harness_env(self):
        return {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "disabled"}

    @staticmethod
    def _kill(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self):
        for pgid in self.groups:
            self._kill(pgid)
