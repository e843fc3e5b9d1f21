"""Metrics end to end on the local cluster: agents sample their hosts, workers and chips (libtpu's service, here the
simulator `torus up` starts per simulated TPU host), the head stores the series and serves them as JSON
(/api/v0/metrics) and Prometheus text (/metrics), tagged with node, slice, worker id, chip, run and rank."""

import gzip
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import binary, wait_until

PYTHON = "/usr/bin/python3"
V6E_4X4 = ("--accelerator-type", "TPU-V6E", "--topology", "4x4")
FAST_METRICS = ("--metrics-period-ms", "500")

# Keeps one CPU busy for a while, so the simulated chips of its host see load.
BUSY = """\
import sys, time
import torus_train
rank = torus_train.get_context().rank
end = time.time() + float(sys.argv[1])
step = 0
while time.time() < end:
    x = 0
    for i in range(200000):
        x += i * i
    step += 1
    if step % 20 == 0:
        torus_train.report({"step": step, "loss": 1.0 / step})
print(f"rank {rank} done after {step} steps", flush=True)
"""


def http(torus, path, token=True, method="GET", headers=None):
    """(status, headers, body bytes) of a request to the head's HTTP port."""
    address = (torus.session / "dashboard_address").read_text().strip()
    all_headers = dict(headers or {})
    if token:
        all_headers["Authorization"] = f"Bearer {torus.token}"
    request = urllib.request.Request(f"http://{address}{path}", headers=all_headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def get_json(torus, path):
    code, _, body = http(torus, path)
    assert code == 200, f"GET {path}: {code} {body[:500]!r}"
    return json.loads(body)


def series(torus, name, **labels):
    query = "&".join([f"name={name}", "since=-2m", *(f"{k}={v}" for k, v in labels.items())])
    return get_json(torus, f"/api/v0/metrics?{query}")["series"]


def latest(torus, name, **labels):
    query = "&".join([f"name={name}", "latest=true", *(f"{k}={v}" for k, v in labels.items())])
    return get_json(torus, f"/api/v0/metrics?{query}")["series"]


def scrape(torus):
    """/metrics parsed by the Prometheus client's own parser (it raises on malformed text): {(name, labels): value}."""
    code, headers, body = http(torus, "/metrics")
    assert code == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def slice_hosts(torus, slice_name):
    status = json.loads(torus.ok("status", "--json").stdout)
    s = [s for s in status["slices"] if s["name"] == slice_name][0]
    return [h["node_id"] for h in sorted(s["hosts"], key=lambda h: h["worker_id"])]


def test_gang_load_raises_its_chips_duty_cycle_tagged_with_run_and_rank(torus, tmp_path):
    torus.up(*FAST_METRICS)
    # Every alive node reports its host metrics.
    nodes = [n["node_id"] for n in get_json(torus, "/api/v0/nodes?state=ALIVE")]
    wait_until(lambda: {s["labels"]["node_id"] for s in latest(torus, "torus_node_cpu_percent")} >= set(nodes), 30,
               message="host CPU of every node")
    # Simulated v6e chips answer through the libtpu client: idle chips, HBM total below spec.
    wait_until(lambda: len(latest(torus, "torus_tpu_hbm_total_bytes")) >= 16, 30, message="HBM totals of v6e chips")
    totals = latest(torus, "torus_tpu_hbm_total_bytes", chip="0")
    v6e = [s for s in totals if s["labels"]["slice"].startswith("v6e-")]
    assert len(v6e) == 8 and all(30 * 2**30 < s["points"][0][1] < 32 * 2**30 for s in v6e), totals

    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    argv = [binary("torus"), "train", *V6E_4X4, "--name", "busy", "--storage-path", str(tmp_path / "runs"), "--",
            PYTHON, str(script), "30"]
    proc = subprocess.Popen(argv, env=torus.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def running():
            code, _, body = http(torus, "/api/v0/runs/busy")
            run = json.loads(body) if code == 200 else None
            return run if run and run["status"] == "RUNNING" else None

        run = wait_until(running, 60, message="the run to start")
        run_id = run["run_id"]
        ranks = run["attempts"][-1]["ranks"]
        slice_name = ranks[0]["slice"]
        hosts = slice_hosts(torus, slice_name)

        def busy_chips():
            found = latest(torus, "torus_tpu_duty_cycle_percent", run_id=run_id)
            hot = [s for s in found if s["points"][0][1] > 5]
            return hot if len(hot) >= 16 else None

        hot = wait_until(busy_chips, 60, interval=0.5, message="duty cycle of the run's 16 chips to rise")
        for s in hot:
            labels = s["labels"]
            rank = int(labels["rank"])
            assert labels["node_id"] == hosts[rank], labels
            assert labels["slice"] == slice_name and labels["worker_id"] == str(rank), labels
            assert labels["chip"] in {"0", "1", "2", "3"}
        # Chips of hosts outside the run stay idle (a duty cycle of 0) and carry no run.
        others = [s for s in latest(torus, "torus_tpu_duty_cycle_percent") if s["labels"]["node_id"] not in hosts]
        assert others and all("run_id" not in s["labels"] for s in others)
        assert all(s["points"][0][1] == 0 for s in others), [(s["labels"], s["points"][0]) for s in others]

        # The same, as Prometheus text.
        samples = scrape(torus)
        rank2 = [(labels, v) for (name, labels), v in samples.items()
                 if name == "torus_tpu_duty_cycle_percent" and ("rank", "2") in labels and ("run_id", run_id) in labels]
        assert len(rank2) == 4, rank2
        assert all(dict(labels)["node_id"] == hosts[2] for labels, _ in rank2)
        assert any(v > 5 for _, v in rank2)
        assert samples[("torus_nodes", (("state", "ALIVE"),))] == 16
        assert any(name == "torus_placement_latency_seconds_count" and v >= 1 for (name, _), v in samples.items())
        assert any(name == "torus_grpc_requests_total" and ("method", "/torus.rpc.HeadService/ReportMetrics") in labels
                   for (name, labels) in samples)
        # Worker processes are tagged with their run and rank too.
        workers = latest(torus, "torus_worker_cpu_percent", run_id=run_id)
        assert {s["labels"]["rank"] for s in workers} == {"0", "1", "2", "3"}, workers
    finally:
        torus.run("train", "stop", "busy")
        proc.communicate(timeout=60)


def test_stopped_simulator_shows_its_source_unavailable_and_other_metrics_go_on(torus):
    torus.up(*FAST_METRICS)
    host = "v6e-0-w0"
    wait_until(lambda: latest(torus, "torus_tpu_duty_cycle_percent", node_id=host), 30, message="chip metrics")
    sim_pid = torus.pid_of(host, role="sim")
    os.kill(sim_pid, signal.SIGKILL)

    def unavailable():
        node = get_json(torus, f"/api/v0/nodes/{host}")
        libtpu = [s for s in node.get("metrics_sources", []) if s["source"].startswith("libtpu")]
        return libtpu and not libtpu[0]["available"] and libtpu[0]

    source = wait_until(unavailable, 30, message="libtpu source of the host to be unavailable")
    assert source["error"], source
    samples = scrape(torus)
    assert samples[("torus_metrics_source_up", (("node_id", host), ("source", source["source"])))] == 0
    # Host metrics of that node keep coming, and the other hosts' chips still report.
    before = latest(torus, "torus_node_cpu_percent", node_id=host)[0]["points"][0][0]
    wait_until(lambda: latest(torus, "torus_node_cpu_percent", node_id=host)[0]["points"][0][0] > before, 15,
               message="new host samples")
    others = {s["labels"]["node_id"] for s in latest(torus, "torus_tpu_duty_cycle_percent")}
    assert "v6e-0-w1" in others
    # Once its chip series are stale they leave /metrics; the node's other series stay.
    wait_until(lambda: not [k for k in scrape(torus) if k[0] == "torus_tpu_duty_cycle_percent"
                            and ("node_id", host) in k[1]], 30, message="stale chip series to leave /metrics")


def test_node_logs_list_and_read_agent_and_libtpu_logs(torus):
    torus.up()
    host = "v6e-0-w0"
    listing = wait_until(lambda: (l := get_json(torus, f"/api/v0/nodes/{host}/logs")) and
                         any(f["name"].startswith("tpu/") for f in l["files"]) and l, 30, message="libtpu logs")
    names = {f["name"] for f in listing["files"]}
    assert "agent" in names, names
    tpu_file = sorted(n for n in names if n.startswith("tpu/"))[0]
    body = get_json(torus, f"/api/v0/nodes/{host}/log?file={tpu_file}&offset=0")
    # The simulated libtpu's log of this host: its chips as libtpu announces them.
    assert "Found 4 TPU v6e chip(s) (TPU-V6E, 1 device(s) per chip)" in body["data"], body["data"]
    assert body["file"] == tpu_file and body["node_id"] == host and body["next_offset"] == len(body["data"].encode())
    agent = get_json(torus, f"/api/v0/nodes/{host}/log?file=agent&offset=0")
    assert re.search(rf"\] torus-node \d+ starting: node {host} at ", agent["data"]), agent["data"][:300]
    tail = get_json(torus, f"/api/v0/nodes/{host}/log?file=agent&offset=-100")  # the last 100 bytes
    assert tail["offset"] > 0 and tail["next_offset"] - tail["offset"] == len(tail["data"].encode()) == 100, tail
    first = get_json(torus, f"/api/v0/nodes/{host}/log?file=agent&offset=0&max_bytes=100")
    assert first["offset"] == 0 and first["next_offset"] == 100 == len(first["data"].encode())
    code, _, text = http(torus, f"/api/v0/nodes/{host}/log?file=tpu/%FF")
    assert code == 400 and b"UTF-8" in text
    expected = "expected agent, tpu/<file> or workers/<worker id> as ListLogs names them"
    for bad, why in (("../token", "holds '..'"), ("/etc/passwd", "is an absolute path"),
                     ("tpu/../../token", "holds '..'"), ("nope", "has an unknown prefix")):
        code, _, text = http(torus, f"/api/v0/nodes/{host}/log?file={bad}")
        assert code == 400, (bad, code, text)
        assert json.loads(text)["error"] == f"node {host}: name '{bad}' {why}; {expected}", text
    code, _, _ = http(torus, "/api/v0/nodes/no-such-node/logs")
    assert code == 404


def test_metrics_api_validates_queries_and_lists_paginate(local_cluster):
    torus = local_cluster
    for query, word in (("name=torus_x&since=yesterday", b"since"), ("name=bad%20name", b"name"),
                        ("name=torus_x&color=red", b"color"), ("name=torus_x&max_points=0", b"max_points"),
                        ("name=torus_x&latest=yes", b"latest")):
        code, _, body = http(torus, f"/api/v0/metrics?{query}")
        assert code == 400 and word in body, (query, code, body)
    # Series per metric name, once every agent has reported: 16 hosts, 48 simulated TPU chips.
    names = wait_until(lambda: (n := get_json(torus, "/api/v0/metrics")["names"]) and
                       n.get("torus_node_cpu_percent") == 16 and n.get("torus_tpu_duty_cycle_percent") == 48 and n,
                       30, message="every node's and chip's first samples")
    assert names["torus_tpu_hbm_total_bytes"] == 48 and names["torus_node_memory_total_bytes"] == 16, names
    code, headers, body = http(torus, "/api/v0/nodes?limit=5&offset=10")
    assert code == 200 and len(json.loads(body)) == 5 and headers["X-Total-Count"] == "16"
    code, headers, body = http(torus, "/api/v0/nodes?limit=5&offset=14")
    assert [n["node_id"] for n in json.loads(body)] == [n["node_id"] for n in get_json(torus, "/api/v0/nodes")][14:]
    assert len(get_json(torus, "/api/v0/nodes?label=torus.io/tpu-slice-name%3Dv6e-0")) == 4
    assert len(get_json(torus, "/api/v0/slices?accelerator_type=TPU-V6E")) == 2
    for query in ("limit=0", "limit=x", "offset=-1", "label=novalue"):
        code, _, body = http(torus, f"/api/v0/nodes?{query}")
        assert code == 400, (query, code, body)
    # Jobs and runs: filters by status, and pages.
    for i in range(3):
        torus.ok("job", "submit", "--no-wait", "--", "true")
    jobs = wait_until(lambda: (j := get_json(torus, "/api/v0/jobs?status=SUCCEEDED")) and len(j) == 3 and j, 30,
                      message="three jobs to succeed")
    assert all(j["status"] == "SUCCEEDED" for j in jobs)
    assert get_json(torus, "/api/v0/jobs?status=RUNNING") == []
    code, headers, body = http(torus, "/api/v0/jobs?limit=2")
    assert code == 200 and len(json.loads(body)) == 2 and headers["X-Total-Count"] == "3"
    code, headers, body = http(torus, "/api/v0/runs?status=RUNNING&limit=1")
    assert code == 200 and json.loads(body) == [] and headers["X-Total-Count"] == "0"


def test_browser_login_sets_an_httponly_cookie_that_only_reads(local_cluster):
    torus = local_cluster
    address = (torus.session / "dashboard_address").read_text().strip()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as login:
        opener.open(f"http://{address}/?token={torus.token}", timeout=10)
    assert login.value.code == 303 and login.value.headers["Location"] == "/"
    cookie = login.value.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and cookie.startswith("torus_token=")
    jar = cookie.split(";")[0]
    # The cookie reads the API and the page; it cannot change anything.
    code, _, body = http(torus, "/api/v0/nodes", token=False, headers={"Cookie": jar})
    assert code == 200 and len(json.loads(body)) == 16
    code, _, _ = http(torus, "/", token=False, headers={"Cookie": jar})
    assert code == 200
    code, _, _ = http(torus, "/api/jobs/", token=False, method="POST", headers={"Cookie": jar})
    assert code == 401
    # No token, or a wrong one, gets nothing.
    for headers in ({}, {"Cookie": "torus_token=wrong"}, {"Authorization": "Bearer wrong"}):
        for path in ("/api/v0/nodes", "/metrics", "/"):
            code, _, _ = http(torus, path, token=False, headers=headers)
            assert code == 401, (path, headers, code)
    code, _, body = http(torus, "/?token=wrong", token=False)
    assert code == 401 and b"not this cluster" in body
    code, _, _ = http(torus, "/healthz", token=False)
    assert code == 200
    # A browser accepts brotli; the head answers gzip, which costs it a fraction of the CPU on large replies.
    code, headers, body = http(torus, "/api/v0/cluster", headers={"Accept-Encoding": "br, gzip, deflate"})
    assert code == 200 and headers["Content-Encoding"] == "gzip"
    assert json.loads(gzip.decompress(body))["nodes"]


def test_read_only_mode_must_be_switched_on_and_only_reads(torus, tmp_path):
    session = tmp_path / "ro"
    proc = torus.spawn([binary("torus-head"), "--session-dir", session, "--port", "0", "--dashboard-port", "0",
                        "--dashboard-read-only"], tmp_path / "head.log")
    address = wait_until(lambda: (session / "dashboard_address").exists() and
                         (session / "dashboard_address").read_text().strip(), 15, message="head address")
    token = (session / "token").read_text().strip()

    def call(path, method="GET", headers=None):
        request = urllib.request.Request(f"http://{address}{path}", method=method, headers=headers or {},
                                         data=b"{}" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    assert call("/api/v0/nodes") == 200
    assert call("/metrics") == 200
    # Logs may print a job's environment, which holds the cluster token: they still need it.
    for path in ("/api/jobs/x/logs", "/api/v0/jobs/x/logs", "/api/v0/runs/x/logs", "/api/v0/nodes/x/logs",
                 "/api/v0/nodes/x/log?file=agent"):
        assert call(path) == 401, path
        assert call(path, headers={"Authorization": f"Bearer {token}"}) == 404, path
    assert call("/api/jobs/", method="POST", headers={"Content-Type": "application/json"}) == 401
    assert call("/api/v0/nodes", headers={"Authorization": "Bearer wrong"}) == 401
    assert call("/api/v0/nodes", headers={"Authorization": f"Bearer {token}"}) == 200
    proc.terminate()
    proc.wait(timeout=10)
