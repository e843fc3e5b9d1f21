"""The head's HTTP API under many concurrent clients: no connection is reset, no 5xx, and every acknowledged
submission is there afterwards."""

import http.client
import json
import threading
from collections import Counter

CLIENTS = 64
PER_CLIENT = 100


def submit_all(address, token, prefix, fresh_connections, clients=CLIENTS, per_client=PER_CLIENT):
    """`clients` threads, each submitting `per_client` jobs that wait for a resource no node has (so that nothing
    runs); with fresh_connections each request opens its own connection, as curl or a client without a session
    does. Returns (acknowledged ids, Counter of errors). bench/http_load.py times it."""
    host, port = address.rsplit(":", 1)
    acked, errors = [], Counter()
    lock = threading.Lock()

    def client(c):
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        for i in range(per_client):
            job_id = f"{prefix}-{c}-{i}"
            body = json.dumps({"entrypoint": "true", "submission_id": job_id,
                               "entrypoint_resources": {"no_such_resource": 1}})
            try:
                conn.request("POST", "/api/jobs/", body,
                             {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
                response = conn.getresponse()
                text = response.read()
                with lock:
                    if response.status == 200:
                        acked.append(job_id)
                    else:
                        errors[f"HTTP {response.status}: {text[:80]!r}"] += 1
                if fresh_connections or response.getheader("Connection", "").lower() == "close":
                    conn.close()
            except OSError as error:  # ConnectionResetError, BrokenPipeError, timeouts
                with lock:
                    errors[f"{type(error).__name__}: {error}"] += 1
                conn.close()
            except http.client.HTTPException as error:  # RemoteDisconnected
                with lock:
                    errors[f"{type(error).__name__}: {error}"] += 1
                conn.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return acked, errors


def test_64_clients_opening_a_connection_per_request_are_never_reset(torus):
    torus.start_head("--no-local-node")
    address = (torus.session / "dashboard_address").read_text().strip()
    for prefix, fresh in (("fresh", True), ("kept", False)):
        acked, errors = submit_all(address, torus.token, prefix, fresh)
        assert errors == Counter(), errors
        assert len(acked) == CLIENTS * PER_CLIENT
    listed = {j["submission_id"] for j in json.loads(torus.ok("job", "list", "--json").stdout)}
    assert len(listed) == 2 * CLIENTS * PER_CLIENT
