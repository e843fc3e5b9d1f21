"""The kubernetes provider of a real torus-head against a fake Kubernetes API server (no real one can run here): the
sequence of requests for launches and removals, never a partial slice after an error, a failed pod failing its
slice, and every object sent checked against the Kubernetes API's own schemas (k8s_schema.py)."""

import http.server
import json
import subprocess
import threading
import urllib.parse
import urllib.request

import pytest

from conftest import binary, wait_until
from k8s_schema import problems_of

V6E_SLICE = ("--accelerator-type", "TPU-V6E", "--topology", "4x4")


class FakeApiServer(http.server.ThreadingHTTPServer):
    """Pods and Services of one namespace in memory; every request recorded as (method, path, body)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), FakeApiHandler)
        self.lock = threading.Lock()
        self.requests = []
        self.pods = {}
        self.services = {}
        self.refuse_pod_number = None  # the Nth pod creation (1-based) is refused with 403
        self.pod_creations = 0
        self.token_seen = set()

    def requests_of(self, method=None):
        with self.lock:
            return [r for r in self.requests if method is None or r[0] == method]


def _selected(obj, selector):
    labels = obj["metadata"].get("labels", {})
    for term in filter(None, selector.split(",")):
        key, value = term.split("=", 1)
        if labels.get(key) != value:
            return False
    return True


class FakeApiHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code, reason, message):
        self._answer(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                            "message": message, "code": code})

    def _handle(self, method):
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")  # api v1 namespaces NS (pods|services) [NAME]
        with server.lock:
            server.requests.append((method, self.path, body))
            server.token_seen.add(self.headers.get("Authorization"))
            if len(parts) < 5 or parts[:3] != ["api", "v1", "namespaces"] or parts[4] not in ("pods", "services"):
                return self._status(404, "NotFound", f"no route {url.path}")
            ns, kind = parts[3], parts[4]
            store = server.pods if kind == "pods" else server.services
            if method == "POST":
                name = body["metadata"]["name"]
                if kind == "pods":
                    server.pod_creations += 1
                    if server.refuse_pod_number == server.pod_creations:
                        return self._status(403, "Forbidden", f'pods "{name}" is forbidden: exceeded quota: tpu-quota')
                if name in store:
                    return self._status(409, "AlreadyExists", f'{kind} "{name}" already exists')
                obj = dict(body, status={"phase": "Pending"} if kind == "pods" else {})
                obj["metadata"] = dict(body["metadata"], namespace=ns)
                store[name] = obj
                return self._answer(201, obj)
            if method == "GET" and len(parts) == 5:
                items = [o for o in store.values() if _selected(o, query.get("labelSelector", ""))]
                return self._answer(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
            if method == "DELETE" and len(parts) == 5:
                gone = [n for n, o in store.items() if _selected(o, query.get("labelSelector", ""))]
                items = [store.pop(n) for n in gone]
                return self._answer(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
            if method == "DELETE" and len(parts) == 6:
                if parts[5] not in store:
                    return self._status(404, "NotFound", f'{kind} "{parts[5]}" not found')
                return self._answer(200, store.pop(parts[5]))
            return self._status(405, "MethodNotAllowed", f"{method} {url.path}")

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")


@pytest.fixture
def api_server():
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def write_config(tmp_path, api_server, classes):
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("service-account-token\n")
    (account / "namespace").write_text("torus-ns\n")
    config = tmp_path / "autoscaler.yaml"
    config.write_text(f"""
provider:
  type: kubernetes
  api_server: http://127.0.0.1:{api_server.server_address[1]}
  service_account_dir: {account}
  image: registry.example.com/torus:test
  head_address: torus-head.torus-ns.svc:6380
failure_backoff_s: 300
node_types:
  - name: v6e
    tpu: {{pod_type: v6e-16, topology: 4x4}}
    num_cpus: 16
    memory: 64Gi
    labels: {{team: ml}}
    reservation: tpu-reservation
    capacity_classes: {classes}
""")
    return config


def start_head(torus, tmp_path, api_server, classes, head_args=()):
    config = write_config(tmp_path, api_server, classes)
    session = tmp_path / "session"
    torus.spawn([binary("torus-head"), "--session-dir", session, "--port", "0", "--dashboard-port", "0",
                 "--autoscaler-config", config, *head_args], tmp_path / "head.log")
    wait_until(lambda: (session / "head_address").exists() and (session / "dashboard_address").exists(), 15,
               message="the head serving")
    return session


def cli_env(session):
    env = {"TORUS_ADDRESS": (session / "head_address").read_text().strip(),
           "TORUS_TOKEN": (session / "token").read_text().strip()}
    if (session / "ca.crt").exists():
        env["TORUS_TLS_CA"] = str(session / "ca.crt")
    return env


def autoscaler(session):
    address = (session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}/api/v0/autoscaler",
                                     headers={"Authorization": f"Bearer {(session / 'token').read_text().strip()}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def slice_requests(api_server, slice_name):
    return [(m, p) for m, p, _ in api_server.requests_of() if slice_name in p or
            (m == "POST" and slice_name in json.dumps(_))]


def test_a_launch_creates_a_service_and_one_pod_per_host_and_a_timeout_deletes_them_all(torus, tmp_path, api_server):
    session = start_head(torus, tmp_path, api_server,
                         "[{class: spot, provisioning_timeout_s: 2}, {class: reserved, provisioning_timeout_s: 2}, "
                         "flex-start]")
    torus.ok("slice", "reserve", *V6E_SLICE, "--name", "g", env=cli_env(session))
    wait_until(lambda: len(api_server.pods) == 4, 15, message="four pods")
    posts = api_server.requests_of("POST")
    assert [p for _, p, _ in posts] == ["/api/v1/namespaces/torus-ns/services"] + ["/api/v1/namespaces/torus-ns/pods"] * 4
    service, pods = posts[0][2], [b for _, _, b in posts[1:]]
    spot_slice = service["metadata"]["name"]
    assert spot_slice.startswith("v6e-")
    assert service["spec"] == {"clusterIP": "None", "selector": {"torus.io/slice": spot_slice},
                               "publishNotReadyAddresses": True}
    for worker, pod in enumerate(pods):
        assert problems_of(pod) == [], pod
        assert pod["metadata"]["name"] == f"{spot_slice}-w{worker}"
        assert pod["spec"]["hostname"] == f"{spot_slice}-w{worker}" and pod["spec"]["subdomain"] == spot_slice
        assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                               "cloud.google.com/gke-tpu-topology": "4x4",
                                               "cloud.google.com/gke-spot": "true"}
        container = pod["spec"]["containers"][0]
        assert container["resources"]["requests"]["google.com/tpu"] == "4"
        assert container["resources"]["limits"] == {"google.com/tpu": "4"}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["TPU_WORKER_ID"] == str(worker) and env["TPU_NAME"] == spot_slice
        assert env["TPU_WORKER_HOSTNAMES"].split(",")[2] == f"{spot_slice}-w2.{spot_slice}.torus-ns.svc"
        assert env["TORUS_NODE_MARKET_TYPE"] == "spot"
        assert container["args"][:2] == ["--address", "torus-head.torus-ns.svc:6380"]
        assert container["args"][-2:] == ["--labels", "team=ml"]
    assert problems_of(service) == [], service
    assert api_server.token_seen == {"Bearer service-account-token"}

    # Nothing registers (no TPU VMs here): after spot's 2 s the slice is deleted whole, and reserved is tried.
    def reserved_pods():
        return [p for p in api_server.pods.values()
                if p["spec"]["nodeSelector"].get("cloud.google.com/reservation-name") == "tpu-reservation"]
    wait_until(lambda: len(reserved_pods()) == 4, 20, message="the reserved class launched")
    deletes = [p for m, p, _ in api_server.requests_of("DELETE")]
    assert deletes[:2] == [f"/api/v1/namespaces/torus-ns/pods?labelSelector=torus.io%2Fslice%3D{spot_slice}",
                           f"/api/v1/namespaces/torus-ns/services/{spot_slice}"], deletes
    assert not any(p["metadata"]["labels"]["torus.io/slice"] == spot_slice for p in api_server.pods.values())
    for pod in reserved_pods():
        assert problems_of(pod) == []
        assert "cloud.google.com/gke-spot" not in pod["spec"]["nodeSelector"]
    wait_until(lambda: len(api_server.pods) == 4 and all(
        p["spec"]["nodeSelector"].get("cloud.google.com/gke-flex-start") == "true" for p in api_server.pods.values()),
        20, message="then flex-start")
    flex = [p for p in api_server.pods.values()][0]
    assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in \
        flex["spec"]["tolerations"]
    assert len(api_server.pods) == 4 and len(api_server.services) == 1, "only the slice being launched is left"
    reason = json.loads(torus.ok("pg", "get", "g", "--json", env=cli_env(session)).stdout)["reason"]
    assert "(TPU-V6E 4x4, flex-start); spot: no capacity within 2 s; reserved: no capacity within 2 s" in reason, reason


def test_a_refused_pod_deletes_what_was_created_and_the_next_class_is_tried(torus, tmp_path, api_server):
    api_server.refuse_pod_number = 3
    session = start_head(torus, tmp_path, api_server, "[spot, on-demand]")
    torus.ok("slice", "reserve", *V6E_SLICE, "--name", "g", env=cli_env(session))
    wait_until(lambda: len(api_server.pods) == 4 and all(
        p["metadata"]["labels"]["torus.io/capacity-class"] == "on-demand" for p in api_server.pods.values()),
        15, message="the next class's four pods")
    methods = [(m, p.split("?")[0].rsplit("/", 1)[-1] if m == "DELETE" else p.rsplit("/", 1)[-1])
               for m, p, _ in api_server.requests_of() if m != "GET"]
    first = api_server.requests_of("POST")[0][2]["metadata"]["name"]
    assert methods[:7] == [("POST", "services"), ("POST", "pods"), ("POST", "pods"), ("POST", "pods"),
                           ("DELETE", "pods"), ("DELETE", first), ("POST", "services")], methods
    assert all(p["metadata"]["labels"]["torus.io/capacity-class"] == "on-demand" for p in api_server.pods.values())
    failed = [e for e in autoscaler(session)["events"] if e["kind"] == "launch-failed"]
    assert len(failed) == 1 and failed[0]["capacity_class"] == "spot"
    assert "exceeded quota: tpu-quota" in failed[0]["message"], failed


def test_a_failed_pod_fails_its_slice_which_is_deleted(torus, tmp_path, api_server):
    session = start_head(torus, tmp_path, api_server, "[{class: spot, provisioning_timeout_s: 600}, on-demand]")
    torus.ok("slice", "reserve", *V6E_SLICE, "--name", "g", env=cli_env(session))
    wait_until(lambda: len(api_server.pods) == 4, 15, message="four pods")
    victim = sorted(api_server.pods)[1]
    spot_slice = api_server.pods[victim]["metadata"]["labels"]["torus.io/slice"]
    with api_server.lock:
        api_server.pods[victim]["status"] = {"phase": "Failed", "reason": "Preempted",
                                             "message": "the spot VM was reclaimed"}
    wait_until(lambda: not any(p["metadata"]["labels"]["torus.io/slice"] == spot_slice
                               for p in api_server.pods.values()), 20, message="the failed slice deleted")
    failed = [e for e in autoscaler(session)["events"] if e["kind"] == "launch-failed"]
    assert [(e["slice"], e["message"]) for e in failed] == [
        (spot_slice, f"pod {victim} Failed: Preempted: the spot VM was reclaimed")]
    wait_until(lambda: len(api_server.pods) == 4 and all(
        p["metadata"]["labels"]["torus.io/capacity-class"] == "on-demand" for p in api_server.pods.values()),
        15, message="the next class launched")
    assert all(p["metadata"]["labels"]["torus.io/capacity-class"] == "on-demand" for p in api_server.pods.values())


def test_a_restarted_head_takes_up_the_slices_it_launched(torus, tmp_path, api_server):
    session = start_head(torus, tmp_path, api_server, "[{class: spot, provisioning_timeout_s: 600}]")
    torus.ok("slice", "reserve", *V6E_SLICE, "--name", "g", env=cli_env(session))
    wait_until(lambda: len(api_server.pods) == 4, 15, message="four pods")
    launched = sorted({p["metadata"]["labels"]["torus.io/slice"] for p in api_server.pods.values()})
    head = torus._children[-1]
    head.terminate()
    head.wait(timeout=15)
    (session / "dashboard_address").unlink()
    torus.spawn([binary("torus-head"), "--session-dir", session, "--port", "0", "--dashboard-port", "0",
                 "--autoscaler-config", tmp_path / "autoscaler.yaml"], tmp_path / "head2.log")
    wait_until(lambda: (session / "dashboard_address").exists(), 15, message="the new head serving")
    wait_until(lambda: [s["name"] for s in autoscaler(session)["slices"]] == launched, 20,
               message="the launched slice taken up")
    assert len(api_server.requests_of("POST")) == 5, "nothing launched again"


def test_a_tls_head_gives_its_pods_the_ca_and_join_token_of_the_tls_secret_and_never_the_ca_key(torus, tmp_path,
                                                                                                  api_server):
    secrets = tmp_path / "secrets"
    torus.ok("tls", "init", secrets)
    session = start_head(torus, tmp_path, api_server, "[on-demand]",
                         ("--tls-ca", secrets / "ca.crt", "--tls-ca-key", secrets / "ca.key",
                          "--join-token-file", secrets / "join_token"))
    assert (session / "ca.crt").read_text() == (secrets / "ca.crt").read_text()
    torus.ok("slice", "reserve", *V6E_SLICE, "--name", "g", env=cli_env(session))
    wait_until(lambda: len(api_server.pods) == 4, 15, message="four pods")
    for pod in api_server.pods.values():
        assert problems_of(pod) == [], pod
        container = pod["spec"]["containers"][0]
        args = container["args"]
        assert args[args.index("--tls-ca") + 1] == "/var/run/torus-tls/ca.crt", args
        assert args[args.index("--join-token-file") + 1] == "/var/run/torus-tls/join_token", args
        assert {"name": "torus-tls", "mountPath": "/var/run/torus-tls", "readOnly": True} in container["volumeMounts"]
        tls_volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "torus-tls")
        assert tls_volume["secret"]["secretName"] == "torus-tls"
        assert tls_volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"},
                                                 {"key": "join_token", "path": "join_token"}]


def test_a_tls_head_that_makes_its_own_ca_refuses_the_kubernetes_provider(torus, tmp_path, api_server):
    """Its pods could not join: they hold the Secret's CA and join token, not ones the head made."""
    config = write_config(tmp_path, api_server, "[on-demand]")
    result = subprocess.run([binary("torus-head"), "--session-dir", tmp_path / "session", "--port", "0",
                             "--dashboard-port", "0", "--tls", "--autoscaler-config", config],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert ("the kubernetes provider's pods join a TLS head with the CA and join token of the Secret torus-tls; start "
            "the head with --tls-ca, --tls-ca-key and --join-token-file from that Secret") in result.stdout + \
        result.stderr
