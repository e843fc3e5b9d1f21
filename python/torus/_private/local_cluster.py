"""The local cluster that init() starts when it finds none: a head and one agent (`torus start --head`) in a session
directory of its own, on free ports, sharing the driver's fate.

Fate: before starting anything, the driver starts a guard (`python3 -m torus._private.local_cluster ROOT`) whose
standard input is a pipe that only the driver holds. However the driver ends — shutdown(), an exception, SIGTERM,
SIGKILL — the pipe closes, and the guard stops the cluster (`torus down`) and removes its directory. Two drivers
never collide: each has its own directory and ports.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from torus import exceptions


def torus_binary():
    """The `torus` CLI beside this source tree's build, else on PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    for candidate in (os.path.join(root, "build", "bin", "torus"), shutil.which("torus")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise exceptions.TorusError("cannot start a local cluster: no `torus` binary beside this package or on PATH")


def read_session_endpoint(root):
    """(head address, token) of the latest session under `root`, or None."""
    session = os.path.join(root, "session_latest")
    try:
        with open(os.path.join(session, "head_address")) as f:
            address = f.read().strip()
        with open(os.path.join(session, "token")) as f:
            token = f.read().strip()
    except OSError:
        return None
    return address, token


def _number(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


class LocalCluster:
    """A cluster this process started; stop() ends it (and so does this process's end, through the guard)."""

    def __init__(self, binary, root, guard):
        self.binary = binary
        self.root = root
        self._guard = guard  # the guard process; its stdin is our end of the pipe

    @classmethod
    def start(cls, *, object_store_memory=None, num_cpus=None, num_gpus=None, resources=None, labels=None):
        binary = torus_binary()
        root = tempfile.mkdtemp(prefix="torus-local-")
        env = dict(os.environ, TORUS_TEMP_DIR=root)
        guard = subprocess.Popen([sys.executable, "-m", "torus._private.local_cluster", binary, root],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=env, start_new_session=True)
        cluster = cls(binary, root, guard)
        # Free ports: several drivers on one machine each start their own.
        argv = [binary, "start", "--head", "--port", "0", "--dashboard-port", "0",
                "--task-python", sys.executable]
        if object_store_memory:
            argv += ["--object-store-memory", str(object_store_memory)]
        if num_cpus is not None:
            argv += ["--num-cpus", _number(num_cpus)]
        custom = dict(resources or {})
        if num_gpus:
            custom["GPU"] = num_gpus
        if custom:
            import json
            argv += ["--resources", json.dumps(custom)]
        if labels:
            argv += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
        try:
            out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            cluster.stop()
            raise exceptions.TorusError("`torus start --head` did not finish within 120 s") from None
        if out.returncode != 0:
            cluster.stop()
            message = out.stderr.strip().removeprefix("torus start: ")
            if out.returncode == 2:
                raise ValueError(message)
            raise exceptions.TorusError(f"`torus start --head` failed ({out.returncode}): {message}")
        endpoint = read_session_endpoint(root)
        if endpoint is None:
            cluster.stop()
            raise exceptions.TorusError(f"the local cluster in {root} wrote no head address")
        return cluster, endpoint

    def stop(self):
        """Stops the cluster and removes its directory (waits for the guard, which does it)."""
        guard, self._guard = self._guard, None
        if guard is None:
            return
        try:
            guard.stdin.close()
            guard.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            _stop(self.binary, self.root)


def _stop(binary, root):
    subprocess.run([binary, "down"], env=dict(os.environ, TORUS_TEMP_DIR=root), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)
    shutil.rmtree(root, ignore_errors=True)


def _guard_main(binary, root):
    """Waits until the driver's end of stdin closes, then stops the cluster under `root`."""
    import signal
    # A Ctrl-C in the driver's terminal reaches its process group, not this session; ignore it anyway.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.read(0, 4096):
        pass
    _stop(binary, root)


if __name__ == "__main__":
    _guard_main(sys.argv[1], sys.argv[2])
