"""Services on a local cluster: replicas (gang runs on whole slices or CPU bundles) behind the head's ingress.

Deploying the OpenAI-compatible example on v6e-8 slices and calling it through the ingress, streaming included; a
replica's host killed under load (only requests in flight on it fail; the replica comes back on another slice);
autoscaling on ongoing requests up and down, and from zero; a rolling update under steady load with no failed
request; and bad specs refused with the field named."""

import http.client
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import wait_until

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "clusters" / "serving.yaml"
ECHO = Path(__file__).resolve().parent / "serve" / "echo_server.py"
OPENAI = REPO / "examples" / "serve" / "openai_server.py"
PYTHON = "/usr/bin/python3"


def api(torus, method, path, body=None, content_type="application/json"):
    """(status, JSON) of a call to the head's HTTP API."""
    address = (torus.session / "dashboard_address").read_text().strip()
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {torus.token}", "Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ingress(torus):
    host, port = (torus.session / "serve_address").read_text().strip().rsplit(":", 1)
    return host, int(port)


def call(torus, path, body=None, timeout=30):
    """(status, body bytes) of a request through the ingress."""
    host, port = ingress(torus)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def echo_spec(tmp_path, name="echo", extra="", version="1", replicas="num_replicas: 1"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""
name: {name}
route_prefix: /{name}
entrypoint: [{PYTHON}, {ECHO}]
env: {{ECHO_VERSION: "{version}"}}
replica: {{num_workers: 1, resources_per_worker: {{CPU: 1}}, label_selector: {{pool: serve}}}}
health_check_period_s: 0.5
graceful_shutdown_timeout_s: 10
{replicas}
{extra}
""")
    return path


def service(torus, name):
    code, body = api(torus, "GET", f"/api/v0/services/{name}")
    assert code == 200, body
    return body


def wait_running(torus, name, ready, timeout=90):
    """Waits until service `name` is RUNNING with exactly `ready` READY replicas; returns its view."""
    def running():
        s = service(torus, name)
        return s if s["status"] == "RUNNING" and s["ready_replicas"] == ready else None
    return wait_until(running, timeout, interval=0.2, message=f"service {name} RUNNING with {ready} READY")


class Load:
    """Threads sending requests through the ingress in a loop; records every answer's status and its replica."""

    def __init__(self, torus, path, threads=4):
        self.torus, self.path = torus, path
        self.results = []  # (status, body)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop) for _ in range(threads)]

    def _loop(self):
        while not self.stop.is_set():
            try:
                result = call(self.torus, self.path, timeout=30)
            except OSError as e:
                result = (0, str(e).encode())
            with self.lock:
                self.results.append(result)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)

    def count(self):
        with self.lock:
            return len(self.results)

    def failures(self):
        with self.lock:
            return [r for r in self.results if r[0] != 200]


def test_openai_example_on_v6e_slices_answers_and_streams_through_the_ingress(torus, tmp_path):
    torus.up(spec=SPEC)
    path = tmp_path / "llm.yaml"
    path.write_text(f"""
name: llm
route_prefix: /llm
entrypoint: [{PYTHON}, {OPENAI}]
env: {{SERVE_TOKEN_DELAY_S: "0.2"}}
replica: {{accelerator_type: TPU-V6E, topology: 2x4, chips_per_host: 4}}
health_check_period_s: 0.5
""")
    deployed = torus.ok("serve", "deploy", path, "--wait", "--timeout-s", "120", timeout=150)
    assert "service llm deployed: version 1" in deployed.stdout, deployed.stdout
    s = service(torus, "llm")
    assert s["status"] == "RUNNING" and s["ready_replicas"] == 1, s
    [replica] = s["replicas"]
    assert replica["state"] == "READY" and replica["version"] == 1, replica
    run = json.loads(torus.ok("train", "status", replica["run_id"], "--json").stdout)
    ranks = run["attempts"][-1]["ranks"]
    assert len(ranks) == 2 and len({r["slice"] for r in ranks}) == 1, "one replica = both hosts of one slice"
    host, port = ingress(torus)
    assert s["url"] == f"http://{host}:{port}/llm"

    code, body = call(torus, "/llm/v1/models")
    assert code == 200 and json.loads(body)["data"][0]["id"] == "torus-tiny", body
    code, body = call(torus, "/llm/v1/completions", {"prompt": "Hello", "max_tokens": 4})
    completion = json.loads(body)
    assert code == 200 and completion["object"] == "text_completion", body
    assert len(completion["choices"][0]["text"]) == 4 and completion["usage"]["completion_tokens"] == 4

    # Streamed: each token is an event that reaches the client as the model makes it, not all at the end.
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", "/llm/v1/chat/completions",
                 body=json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
    arrivals = []
    while True:
        line = response.fp.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            arrivals.append((time.monotonic(), line[6:].strip()))
            if line[6:].strip() == b"[DONE]":
                break
    conn.close()
    assert arrivals[-1][1] == b"[DONE]" and len(arrivals) == 9, arrivals
    # Tokens are made 0.2 s apart: a buffered answer would bring all of them at once.
    assert arrivals[-2][0] - arrivals[0][0] > 0.8, [round(t - arrivals[0][0], 3) for t, _ in arrivals]

    # Unknown paths and the service list.
    code, body = call(torus, "/nothing/here")
    assert code == 404 and json.loads(body)["error"] == "no service serves /nothing/here; routes: /llm", body
    listed = json.loads(torus.ok("serve", "list", "--json").stdout)
    assert [x["name"] for x in listed] == ["llm"]
    text = torus.ok("serve", "status", "llm").stdout
    assert "llm  RUNNING  version 1  1/1 READY" in text, text

    # Metrics: answers by code and the latency histogram.
    address = (torus.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}/metrics", headers={"Authorization": f"Bearer {torus.token}"})
    metrics = urllib.request.urlopen(request, timeout=10).read().decode()
    assert 'torus_serve_requests_total{service="llm",code="200"} 3' in metrics, metrics
    assert 'torus_serve_request_duration_seconds_count{service="llm"} 3' in metrics
    assert 'torus_serve_replicas{service="llm",state="READY"} 1' in metrics

    torus.ok("serve", "delete", "llm")
    wait_until(lambda: not [r for r in json.loads(torus.ok("train", "list", "--json").stdout)
                            if r["status"] not in ("STOPPED", "FAILED", "SUCCEEDED")], 30, message="replica stopped")
    code, body = call(torus, "/llm/v1/models")
    assert code == 404, body


def test_killed_replica_host_fails_only_requests_in_flight_and_the_replica_is_replaced(torus, tmp_path):
    torus.up(spec=SPEC)
    path = tmp_path / "llm.yaml"
    path.write_text(f"""
name: llm
entrypoint: [{PYTHON}, {OPENAI}]
replica: {{accelerator_type: TPU-V6E, topology: 2x4, chips_per_host: 4}}
health_check_period_s: 0.5
num_replicas: 2
""")
    torus.ok("serve", "deploy", path, "--wait", "--timeout-s", "120", timeout=150)
    before = service(torus, "llm")
    victim = before["replicas"][0]
    run = json.loads(torus.ok("train", "status", victim["run_id"], "--json").stdout)
    lost_node = run["attempts"][-1]["ranks"][1]["node_id"]  # an engine worker's host: the gang is lost whole
    lost_slice = run["attempts"][-1]["ranks"][1]["slice"]
    threads = 4
    with Load(torus, "/llm/v1/models", threads=threads) as load:
        wait_until(lambda: load.count() > 50, 30, message="load running")
        os.kill(torus.pid_of(lost_node), signal.SIGKILL)
        failed_at_kill = len(load.failures())

        def replaced():
            s = service(torus, "llm")
            ids = {r["run_id"] for r in s["replicas"] if r["state"] == "READY"}
            return s if s["status"] == "RUNNING" and len(ids) == 2 and victim["run_id"] not in ids else None
        after = wait_until(replaced, 120, interval=0.3, message="replica replaced")
        served = load.count()
        wait_until(lambda: load.count() > served + 50, 30, message="load after the replacement")
    failures = load.failures()
    # Only what was in flight on the lost replica may fail: at most one request per client thread.
    assert failed_at_kill == 0 and len(failures) <= threads, failures
    assert len(load.results) > 100
    new = [r for r in after["replicas"] if r["run_id"] != before["replicas"][1]["run_id"]][0]
    run = json.loads(torus.ok("train", "status", new["run_id"], "--json").stdout)
    assert lost_slice not in {r["slice"] for r in run["attempts"][-1]["ranks"]}, "the new replica is elsewhere"
    assert any("ended" in e and victim["run_id"] in e for e in after["events"]), after["events"]


def test_load_above_the_target_scales_up_and_idle_scales_down_and_zero_wakes_on_a_request(torus, tmp_path):
    torus.up(spec=SPEC)
    path = echo_spec(tmp_path, replicas="""autoscaling: {min_replicas: 0, max_replicas: 3, initial_replicas: 1,
  target_ongoing_requests: 1, upscale_delay_s: 0.5, downscale_delay_s: 3}""")
    torus.ok("serve", "deploy", path, "--wait", "--timeout-s", "60", timeout=90)
    assert service(torus, "echo")["target_replicas"] == 1
    with Load(torus, "/echo/work?sleep=0.3", threads=3) as load:
        s = wait_until(lambda: (lambda s: s if s["ready_replicas"] >= 2 else None)(service(torus, "echo")), 60,
                       interval=0.2, message="scaled up")
        assert s["target_replicas"] >= 2, s
    assert not load.failures(), load.failures()[:3]
    assert any("autoscaling from 1 to" in e for e in s["events"]), s["events"]
    # Idle: down to min_replicas (0) after the delay; every replica stops.
    wait_until(lambda: (lambda s: s if s["target_replicas"] == 0 and not s["replicas"] else None)(service(torus, "echo")),
               60, interval=0.3, message="scaled to zero")
    # From zero, a request waits for a replica and is answered.
    code, body = call(torus, "/echo/again", timeout=90)
    assert code == 200 and json.loads(body)["path"] == "/again", body
    assert service(torus, "echo")["target_replicas"] == 1


def test_a_spec_change_rolls_out_under_steady_load_with_no_failed_request(torus, tmp_path):
    torus.up(spec=SPEC)
    # No waiting for a replica: a request that finds none READY fails at once, so that a gap in the rollout shows.
    no_queue = "queue_timeout_s: 0"
    torus.ok("serve", "deploy", echo_spec(tmp_path, replicas="num_replicas: 2", extra=no_queue), "--wait", timeout=90)
    before = {r["run_id"] for r in service(torus, "echo")["replicas"]}
    unchanged = torus.ok("serve", "deploy", echo_spec(tmp_path, replicas="num_replicas: 2", extra=no_queue))
    assert "service echo unchanged at version 1" in unchanged.stdout
    with Load(torus, "/echo/v?sleep=0.05", threads=3) as load:
        wait_until(lambda: load.count() > 20, 30, message="load running")
        torus.ok("serve", "deploy", echo_spec(tmp_path, version="2", replicas="num_replicas: 2", extra=no_queue),
                 "--wait", timeout=90)
        served = load.count()
        wait_until(lambda: load.count() > served + 20, 30, message="load after the update")
    assert not load.failures(), load.failures()[:5]
    s = service(torus, "echo")
    assert s["version"] == 2 and s["status"] == "RUNNING"
    assert {r["version"] for r in s["replicas"]} == {2} and not before & {r["run_id"] for r in s["replicas"]}
    versions = [json.loads(body)["version"] for _, body in load.results]
    assert versions[0] == "1" and versions[-1] == "2", (versions[:3], versions[-3:])
    # Each answer says the prefix the ingress took off.
    assert json.loads(load.results[-1][1])["prefix"] == "/echo"


def test_a_replica_failing_health_checks_is_replaced(torus, tmp_path):
    torus.up(spec=SPEC)
    flag = tmp_path / "unhealthy"
    path = echo_spec(tmp_path, extra=f"health_check_timeout_s: 1")
    text = path.read_text().replace('ECHO_VERSION: "1"', f'ECHO_VERSION: "1", ECHO_UNHEALTHY_FILE: "{flag}"')
    path.write_text(text)
    torus.ok("serve", "deploy", path, "--wait", timeout=90)
    first = service(torus, "echo")["replicas"][0]["run_id"]
    flag.write_text("")
    wait_until(lambda: any("failed 3 health checks" in e for e in service(torus, "echo")["events"]), 30,
               message="unhealthy noticed")
    flag.unlink()
    s = wait_running(torus, "echo", ready=1)
    ready = [r["run_id"] for r in s["replicas"] if r["state"] == "READY"]
    assert len(ready) == 1 and ready[0] != first, ("the unhealthy replica was replaced", s["replicas"])


def test_bad_specs_are_refused_naming_the_field(torus, tmp_path):
    torus.up(spec=SPEC)
    cases = [
        ("name: x\n", "entrypoint: is required: a shell command or a list of arguments"),
        ("name: Bad_Name\nentrypoint: x\n", 'name: "Bad_Name" is not valid; use 1-40 of a-z, 0-9 and \'-\''),
        ("name: x\nentrypoint: x\nnum_replicas: 2\nautoscaling: {max_replicas: 2}\n",
         "num_replicas and autoscaling cannot both be given; use one"),
        ("name: x\nentrypoint: x\nreplica: {accelerator_type: TPU-V6E, topology: 4x5}\n",
         'replica: topology "4x5" is not valid for TPU-V6E'),
        ("name: x\nentrypoint: x\nreplica: {num_worker: 2}\n", 'replica: unknown field "num_worker"'),
        ("name: x\nentrypoint: x\nroute_prefix: llm\n", "route_prefix: \"llm\" must start with '/'"),
        ("name: x\nentrypoint: x\nautoscaling: {min_replicas: 3, max_replicas: 2}\n",
         "autoscaling.min_replicas: 3 is more than max_replicas (2)"),
        ("[1, 2", "not valid YAML or JSON"),
    ]
    for text, message in cases:
        code, body = api(torus, "POST", "/api/v0/services", text, "application/yaml")
        assert code == 400 and body["error"].startswith(message), (text, body)
    # The CLI says which file and exits 2.
    bad = tmp_path / "bad.yaml"
    bad.write_text(cases[0][0])
    result = torus.run("serve", "deploy", bad)
    assert result.returncode == 2 and f"torus serve deploy: {bad}: entrypoint: is required" in result.stderr, result
    # A route prefix another service has.
    torus.ok("serve", "deploy", echo_spec(tmp_path, name="one", extra=""))
    other = tmp_path / "two.yaml"
    other.write_text(echo_spec(tmp_path, name="two").read_text().replace("route_prefix: /two", "route_prefix: /one"))
    code, body = api(torus, "POST", "/api/v0/services", other.read_text(), "application/yaml")
    assert code == 409 and body["error"] == "route_prefix /one is taken by service one; give this one another", body
    code, body = api(torus, "GET", "/api/v0/services/none")
    assert code == 404 and body["error"] == "service none does not exist"
    code, body = api(torus, "DELETE", "/api/v0/services/none")
    assert code == 404


def test_an_ingress_apart_from_the_head_routes_and_reports_its_load(torus, tmp_path):
    torus.up(spec=SPEC)
    torus.ok("serve", "deploy", echo_spec(tmp_path), "--wait", timeout=90)
    log = tmp_path / "ingress.log"
    proc = torus.spawn(["/bin/sh", "-c", f'exec "$0" serve ingress --host 127.0.0.1 --port 0',
                        str(Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin")) / "torus")], log)
    line = wait_until(lambda: next((l for l in log.read_text().splitlines() if "listening on" in l), None), 15,
                      message="the ingress listening")
    host, port = line.rsplit("http://", 1)[1].rsplit(":", 1)

    def through(path, timeout=30):
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    # Its routes come from the head within a poll.
    code, body = wait_until(lambda: (lambda r: r if r[0] == 200 else None)(through("/echo/far")), 10,
                            message="routed through the remote ingress")
    assert json.loads(body)["path"] == "/far" and json.loads(body)["prefix"] == "/echo", body
    # Its requests in flight count at the head (for autoscaling and draining).
    slow = [threading.Thread(target=through, args=("/echo/slow?sleep=3",)) for _ in range(2)]
    for t in slow:
        t.start()
    seen = wait_until(lambda: (lambda s: s if sum(r["in_flight"] for r in s["replicas"]) == 2 else None)(
        service(torus, "echo")), 5, interval=0.1, message="remote in-flight requests at the head")
    assert seen["replicas"][0]["in_flight"] == 2
    for t in slow:
        t.join()
    code, body = through("/nothing")
    assert code == 404 and json.loads(body)["error"] == "no service serves /nothing; routes: /echo"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
