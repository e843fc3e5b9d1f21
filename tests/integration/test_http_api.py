"""The head's HTTP JSON API: token required, the same cluster view as `torus status --json`, clear errors."""

import json
import urllib.error
import urllib.request

from conftest import wait_until


def get(torus, path, token=None):
    """(status code, parsed JSON or text) of GET http://<dashboard><path>."""
    address = (torus.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body, code = response.read().decode(), response.status
    except urllib.error.HTTPError as error:
        body, code = error.read().decode(), error.code
    try:
        return code, json.loads(body)
    except json.JSONDecodeError:
        return code, body


def test_http_api_serves_the_cluster_view_with_the_token(torus):
    torus.up()
    token = torus.token

    code, cluster = get(torus, "/api/v0/cluster", token)
    assert code == 200
    assert cluster["nodes_alive"] == 16
    assert cluster["resources_total"]["TPU"] == 48
    assert sorted(s["name"] for s in cluster["slices"]) == ["v4-0", "v5e-0", "v6e-0", "v6e-1"]

    code, slices = get(torus, "/api/v0/slices?state=READY", token)
    assert code == 200 and len(slices) == 4
    code, v6e = get(torus, "/api/v0/slices/v6e-1", token)
    assert code == 200
    assert [h["worker_id"] for h in v6e["hosts"]] == [0, 1, 2, 3]
    assert [h["node_id"] for h in v6e["hosts"]] == [f"v6e-1-w{w}" for w in range(4)]

    code, node = get(torus, "/api/v0/nodes/v5e-0-w0", token)
    assert code == 200
    assert node["resources_total"]["TPU"] == 8
    assert node["labels"]["torus.io/tpu-pod-type"] == "v5litepod-8"

    # A node marked dead shows up under ?state=DEAD at once.
    torus.ok("node", "mark-dead", "cpu-0", "--reason", "test")
    code, dead = get(torus, "/api/v0/nodes?state=DEAD", token)
    assert code == 200
    assert [n["node_id"] for n in dead] == ["cpu-0"]
    assert dead[0]["death_reason"] == "marked dead by an operator: test"


def test_http_api_refuses_missing_and_wrong_tokens(torus):
    torus.up(spec=_one_node_spec(torus))
    code, body = get(torus, "/api/v0/cluster")
    assert code == 401
    assert "missing cluster token" in body["error"]
    code, body = get(torus, "/api/v0/nodes", token="wrong")
    assert code == 401
    assert body["error"] == "wrong cluster token"
    # Health needs no token and says nothing about the cluster.
    code, body = get(torus, "/healthz")
    assert code == 200 and body.strip() == "ok"


def test_http_api_errors_are_json(torus):
    torus.up(spec=_one_node_spec(torus))
    token = torus.token
    code, body = get(torus, "/api/v0/nodes/nope", token)
    assert code == 404 and body["error"] == "node nope does not exist"
    code, body = get(torus, "/api/v0/slices/nope", token)
    assert code == 404 and body["error"] == "slice nope does not exist"
    code, body = get(torus, "/api/v0/nodes?state=SLEEPY", token)
    assert code == 400 and "use ALIVE or DEAD" in body["error"]
    code, body = get(torus, "/api/v0/slices?state=SLEEPY", token)
    assert code == 400 and "READY" in body["error"]
    code, body = get(torus, "/api/v0/bogus", token)
    assert code == 404 and "no route GET /api/v0/bogus" in body["error"]


def _one_node_spec(torus):
    spec = torus.root / "one-node.yaml"
    spec.write_text("head: {num_cpus: 1}\n")
    return spec


def test_metrics_in_prometheus_text(torus):
    import re
    torus.up()
    code, _ = get(torus, "/metrics")
    assert code == 401
    torus.ok("slice", "reserve", "--accelerator-type", "TPU-V6E", "--topology", "4x4", "--wait", "10")
    code, text = get(torus, "/metrics", torus.token)
    assert code == 200
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})?'
                        r' (-?[0-9.e+]+|NaN|[+-]Inf)$')
    family, family_type = None, None
    values = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            family = line.split()[2]
        elif line.startswith("# TYPE "):
            assert line.split()[2] == family and line.split()[3] in ("gauge", "counter", "histogram"), line
            family_type = line.split()[3]
        else:
            m = sample.match(line)
            assert m, f"not an exposition line: {line!r}"
            name = m.group(1)
            if family_type == "histogram":
                name = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name == family, line
            values[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
    # The Prometheus client's own parser reads it too.
    from prometheus_client.parser import text_string_to_metric_families
    parsed = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert parsed["torus_placement_latency_seconds"] == "histogram"
    assert values['torus_placement_latency_seconds_count'] >= 1
    assert values['torus_nodes{state="ALIVE"}'] == 16
    assert values['torus_slices{state="RESERVED"}'] == 1
    assert values['torus_slices{state="READY"}'] == 3
    assert values['torus_placement_groups{state="CREATED"}'] == 1
    assert values['torus_resource_total{resource="TPU"}'] == 48
    assert values['torus_resource_available{resource="TPU"}'] == 32  # one 16-chip slice reserved
    assert values['torus_pending_requests'] == 0
    assert values['torus_runs{status="RUNNING"}'] == 0
    assert values['torus_gang_restarts_total'] == 0


def test_bytes_that_are_not_utf8_get_a_clear_error(torus):
    torus.up(spec=_one_node_spec(torus))
    code, body = get(torus, "/api/v0/nodes?state=%ff", torus.token)
    assert code == 400 and "use ALIVE or DEAD" in body["error"]
    address = (torus.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}/api/v0/runs", data=b"\xff\xfe", method="POST",
                                     headers={"Authorization": f"Bearer {torus.token}"})
    try:
        urllib.request.urlopen(request, timeout=10)
        assert False, "accepted a body that is not JSON"
    except urllib.error.HTTPError as error:
        assert error.code == 400, error.read()


def test_the_head_gives_out_its_advertised_host_not_the_bind_address(torus, tmp_path):
    # Bound to loopback but told to advertise a name: the session files, ClusterStatus (what drivers and the CLI
    # read) and the address workers report to all carry the name, and it works.
    from conftest import binary
    session = tmp_path / "adv"
    torus.spawn([binary("torus-head"), "--session-dir", session, "--port", "0", "--dashboard-port", "0",
                 "--host", "127.0.0.1", "--advertise-host", "localhost"], tmp_path / "head.log")
    http_address = wait_until(lambda: (session / "dashboard_address").exists() and
                              (session / "dashboard_address").read_text().strip(), 15, message="head address")
    head_address = (session / "head_address").read_text().strip()
    assert http_address.startswith("localhost:") and head_address.startswith("localhost:"), (http_address,
                                                                                              head_address)
    token = (session / "token").read_text().strip()
    request = urllib.request.Request(f"http://{http_address}/api/v0/cluster",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    # `torus status` dials the gRPC address and then the HTTP address the head gives over gRPC (tasks and actors).
    status = torus.run("status", "--address", head_address, env={"TORUS_TOKEN": token})
    assert status.returncode == 0, status.stderr
    assert "did not answer" not in status.stdout, status.stdout
