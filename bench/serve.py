#!/usr/bin/env python3
"""The ingress against nginx as a reverse proxy, on the same replica, in one run on one machine.

A local cluster (`torus up`, the head host only) runs one service whose replica is nginx itself answering a small
body (so that the replica is never what limits): requests go to the replica directly, through torus's ingress (in
the head), and through an nginx reverse proxy configured as one would for this (upstream keep-alive, HTTP/1.1,
proxy_buffering off, the prefix removed as the ingress does). Measured:

  - added latency: p50/p99 of sequential keep-alive requests through each proxy, less those sent directly
    (rounds interleaved, one client, Python's http.client);
  - requests/s of small answers with `wrk` (keep-alive connections) through each proxy, and directly, with the CPU
    time (user + system) each proxy's processes spent per request meanwhile (the head's process for the ingress);
  - a scale-up: from the controller's decision (the new replica's run submitted) to the replica READY, and what the
    user waits for: `torus serve deploy --wait` of num_replicas 1 -> 2, from command start to exit.

    /usr/bin/python3 bench/serve.py [--requests 3000] [--rounds 3] [--duration 8] [--connections 32]

Needs nginx and wrk (Debian packages nginx-light or nginx, and wrk).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin"))

CLUSTER = "head: {num_cpus: 8, memory: 8Gi}\n"
BACKEND_CONF = """worker_processes 1;
daemon off;
pid DIR/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:PORT;
    location = /health { return 200 "ok\\n"; }
    location / { default_type text/plain; return 200 "hello from the replica\\n"; }
  }
}
"""
PROXY_CONF = """worker_processes auto;
daemon off;
pid {dir}/proxy.pid;
error_log {dir}/proxy.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  upstream replica {{ server {replica}; keepalive 256; }}
  server {{
    listen 127.0.0.1:{port};
    location /bench/ {{
      proxy_pass http://replica/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""


def torus(env, *args, timeout=180):
    return subprocess.run([str(BIN / "torus"), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout, check=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service(env, name):
    session = Path(env["TORUS_TEMP_DIR"]) / "session_latest"
    address = (session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}/api/v0/services/{name}",
                                     headers={"Authorization": f"Bearer {(session / 'token').read_text().strip()}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def spec_text(template, replicas):
    command = (f'd=$(mktemp -d) && sed -e "s|PORT|$TORUS_SERVE_PORT|g" -e "s|DIR|$d|g" {template} > $d/nginx.conf '
               f'&& exec nginx -e stderr -c $d/nginx.conf')
    return (f"name: bench\nroute_prefix: /bench\nentrypoint: {json.dumps(command)}\n"
            f"health_check_period_s: 0.5\nnum_replicas: {replicas}\n")


def latencies(host, port, path, n):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    out = []
    for _ in range(n):
        start = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        out.append(time.perf_counter() - start)
        assert response.status == 200, response.status
    conn.close()
    return out


def cpu_seconds(pids):
    """User + system CPU seconds of the processes `pids` so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def wrk(url, duration, connections):
    out = subprocess.run(["wrk", "-t", "2", "-c", str(connections), "-d", f"{duration}s", url], capture_output=True,
                         text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rate, int(errors[1]) if errors else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench/serve.py needs {tool} (apt-get install nginx-light wrk)")

    root = Path(tempfile.mkdtemp(prefix="torus-bench-serve-"))
    env = dict(os.environ, TORUS_TEMP_DIR=str(root / "torus"))
    (root / "cluster.yaml").write_text(CLUSTER)
    (root / "backend.conf").write_text(BACKEND_CONF)
    proxy = None
    try:
        torus(env, "up", root / "cluster.yaml", "--port", "0", "--dashboard-port", "0")
        (root / "one.yaml").write_text(spec_text(root / "backend.conf", 1))
        torus(env, "serve", "deploy", root / "one.yaml", "--wait", "--timeout-s", "60")
        replica = service(env, "bench")["replicas"][0]["address"]
        r_host, r_port = replica.rsplit(":", 1)
        session = Path(env["TORUS_TEMP_DIR"]) / "session_latest"
        i_host, i_port = (session / "serve_address").read_text().strip().rsplit(":", 1)
        n_port = free_port()
        (root / "proxy.conf").write_text(PROXY_CONF.format(dir=root, replica=replica, port=n_port))
        proxy = subprocess.Popen(["nginx", "-e", str(root / "proxy.err"), "-c", str(root / "proxy.conf")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        head_pid = next(int(line.split()[2]) for line in (session / "processes").read_text().splitlines()
                        if line.split()[0] == "head")
        proxy_pids = lambda: [proxy.pid] + [int(p) for p in subprocess.run(
            ["pgrep", "-P", str(proxy.pid)], capture_output=True, text=True).stdout.split()]
        cpu_of = {"direct": lambda: [], "torus ingress": lambda: [head_pid], "nginx proxy": proxy_pids}
        targets = {"direct": (r_host, int(r_port), "/x"), "torus ingress": (i_host, int(i_port), "/bench/x"),
                   "nginx proxy": ("127.0.0.1", n_port, "/bench/x")}

        # Latency, rounds interleaved.
        samples = {name: [] for name in targets}
        for name, (h, p, path) in targets.items():
            latencies(h, p, path, 200)  # warm up
        for _ in range(args.rounds):
            for name, (h, p, path) in targets.items():
                samples[name] += latencies(h, p, path, args.requests)
        base50, base99 = pct(samples["direct"], 50), pct(samples["direct"], 99)
        print(f"\nLatency of sequential keep-alive requests ({args.rounds} x {args.requests} each), microseconds")
        print(f"{'path':<16}{'p50':>8}{'p99':>8}{'added p50':>11}{'added p99':>11}")
        for name in targets:
            p50, p99 = pct(samples[name], 50), pct(samples[name], 99)
            print(f"{name:<16}{p50 * 1e6:>8.0f}{p99 * 1e6:>8.0f}{(p50 - base50) * 1e6:>11.0f}"
                  f"{(p99 - base99) * 1e6:>11.0f}")

        # Throughput, rounds interleaved; the best of each.
        rates = {name: [] for name in targets}
        cpu_us = {name: [] for name in targets}
        for _ in range(args.rounds):
            for name, (h, p, path) in targets.items():
                pids = cpu_of[name]()
                before = cpu_seconds(pids)
                rate, errors = wrk(f"http://{h}:{p}{path}", args.duration, args.connections)
                assert errors == 0, (name, errors)
                rates[name].append(rate)
                cpu_us[name].append((cpu_seconds(pids) - before) / (rate * args.duration) * 1e6)
        print(f"\nRequests/s with wrk (2 threads, {args.connections} keep-alive connections, {args.duration} s, "
              f"{args.rounds} rounds)")
        print(f"{'path':<16}{'median':>10}{'best':>10}{'proxy CPU us/request':>22}")
        for name in targets:
            cpu = f"{statistics.median(cpu_us[name]):.1f}" if name != "direct" else "-"
            print(f"{name:<16}{statistics.median(rates[name]):>10.0f}{max(rates[name]):>10.0f}{cpu:>22}")
        ratio = statistics.median(rates["torus ingress"]) / statistics.median(rates["nginx proxy"])
        print(f"torus ingress / nginx proxy: {ratio:.2f}")

        # A scale-up: 1 -> 2 replicas.
        (root / "two.yaml").write_text(spec_text(root / "backend.conf", 2))
        start = time.perf_counter()
        torus(env, "serve", "deploy", root / "two.yaml", "--wait", "--timeout-s", "60")
        waited = time.perf_counter() - start
        new = max(service(env, "bench")["replicas"], key=lambda r: r["created_ms"])
        print(f"\nScale-up 1 -> 2 replicas: decision to READY {new['ready_ms'] - new['created_ms']} ms; "
              f"`torus serve deploy --wait` start to exit {waited * 1000:.0f} ms")
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=10)
        subprocess.run([str(BIN / "torus"), "down"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
