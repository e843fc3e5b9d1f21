"""A one-member etcd on loopback for tests and benchmarks (Debian's etcd-server, which scripts/setup.sh installs)."""

import os
import shutil
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(root):
    """Starts etcd with its data and log under `root` on ports free a moment before; returns (Popen, "127.0.0.1:PORT")
    once it answers. The caller kills it by its Popen."""
    assert shutil.which("etcd"), "etcd is not installed (Debian: etcd-server; scripts/setup.sh installs it)"
    client, peer = free_port(), free_port()
    endpoint = f"127.0.0.1:{client}"
    with open(os.path.join(root, "etcd.log"), "wb") as log:
        proc = subprocess.Popen(
            ["etcd", "--name", "t", "--data-dir", os.path.join(root, "etcd-data"),
             "--listen-client-urls", f"http://{endpoint}", "--advertise-client-urls", f"http://{endpoint}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"t=http://127.0.0.1:{peer}"], stdout=log, stderr=log)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            request = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=b'{"key":"AA=="}', method="POST")
            with urllib.request.urlopen(request, timeout=1) as response:
                if response.status == 200:
                    return proc, endpoint
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise TimeoutError(f"etcd did not answer within 30 s; see {root}/etcd.log")
