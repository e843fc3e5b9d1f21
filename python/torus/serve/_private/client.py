"""This process's way to the head for Serve: the head's services API (deploy, read, list, delete services, upload
packages) and the pool of threads that carries handle calls through the ingress.

Where the head is: in a driver, the connection torus.init() made (init runs first when there is none, as Ray's
serve.run starts Ray); in a replica, TORUS_DASHBOARD_ADDRESS and TORUS_TOKEN, which the replica sets from what
serve.run sent it. Requests carry the cluster token as a bearer token (as torus.job_submission sends it); the API
is https, checked against TORUS_TLS_CA, when the cluster runs TLS.

Thread-safety: thread-safe. `current()` makes the process's ServeClient once (under a lock); `reset()` (serve
shutdown) drops it. Service URLs are cached per (app, deployment) until a call finds the service gone.
"""

import concurrent.futures
import json
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request

from torus.serve._private import naming
from torus.serve.exceptions import RayServeException

HANDLE_THREADS = 64

_lock = threading.Lock()
_client = None


class HeadApi:
    """The head's HTTP API (services and packages). Errors: ConnectionError when the head cannot be reached;
    ValueError for a spec the head refuses (its words, naming the field)."""

    def __init__(self, http_address, token):
        self.http_address = http_address
        self.token = token
        ca = os.environ.get("TORUS_TLS_CA")
        scheme = "https" if ca else "http"
        self.base = http_address if "://" in http_address else f"{scheme}://{http_address}"
        self._context = ssl.create_default_context(cafile=ca) if ca and self.base.startswith("https") else None

    def request(self, method, path, body=None, timeout=60):
        """(status, decoded JSON or text) of one request."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._context) as reply:
                status, text = reply.status, reply.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as e:
            raise ConnectionError(f"the head's HTTP API at {self.base} cannot be reached: "
                                  f"{getattr(e, 'reason', e)}") from None
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def deploy(self, spec):
        """{"name", "version", "changed"}; ValueError (400), RouteTakenError (409)."""
        status, body = self.request("POST", "/api/v0/services", spec)
        if status in (200, 201):
            return body
        message = body.get("error", body) if isinstance(body, dict) else body
        if status == 409:
            raise RouteTakenError(str(message))
        if status == 400:
            raise ValueError(str(message))
        raise RayServeException(f"the head refused service {spec.get('name')} ({status}): {message}")

    def get(self, name):
        """The service's view, or None when there is no such service."""
        status, body = self.request("GET", f"/api/v0/services/{urllib.parse.quote(name)}")
        if status == 404:
            return None
        if status != 200:
            raise RayServeException(f"reading service {name} failed ({status}): {body}")
        return body

    def list(self):
        status, body = self.request("GET", "/api/v0/services")
        if status != 200:
            raise RayServeException(f"listing services failed ({status}): {body}")
        return body

    def delete(self, name):
        """True when deleted, False when there was no such service."""
        status, body = self.request("DELETE", f"/api/v0/services/{urllib.parse.quote(name)}")
        if status == 404:
            return False
        if status != 200:
            raise RayServeException(f"deleting service {name} failed ({status}): {body}")
        return True

    def upload_package(self, directory, include_parent_dir):
        """The package URI (gcs://<name>.zip) of `directory`, uploaded unless the head holds it already."""
        from torus.job_submission import _packaging
        name, blob = _packaging.pack_directory(directory, include_parent_dir=include_parent_dir,
                                               use_gitignore=not include_parent_dir)
        path = f"/api/packages/gcs/{name}"
        status, _ = self.request("GET", path)
        if status == 404:
            req = urllib.request.Request(self.base + path, data=blob, method="PUT",
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": "application/zip"})
            try:
                with urllib.request.urlopen(req, timeout=300, context=self._context) as reply:
                    status = reply.status
            except urllib.error.HTTPError as e:
                raise RayServeException(f"uploading {directory} failed ({e.code}): "
                                        f"{e.read().decode('utf-8', 'replace')}") from None
        if status != 200:
            raise RayServeException(f"uploading {directory} failed ({status})")
        return f"gcs://{name}"


class RouteTakenError(ValueError):
    """The head refused a service whose route_prefix another service has (409)."""


class ServeClient:
    """The head's API, the threads that carry handle calls, and the services' URLs as found."""

    def __init__(self, head: HeadApi):
        self.head = head
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=HANDLE_THREADS,
                                                              thread_name_prefix="torus-serve-handle")
        self._urls = {}
        self._urls_lock = threading.Lock()

    def url_of(self, app_name, deployment_name):
        """The URL of the deployment's service at the ingress. DeploymentUnavailableError-like RayServeException
        when the application has no such deployment."""
        key = (app_name, deployment_name)
        with self._urls_lock:
            if key in self._urls:
                return self._urls[key]
        service = self.head.get(naming.service_name(app_name, deployment_name))
        if service is None or (service.get("spec", {}).get("env", {}).get("TORUS_SERVE_APP") != app_name):
            raise RayServeException(f"Deployment(name='{deployment_name}', app='{app_name}') does not exist.")
        url = service.get("url") or ""
        if not url:
            raise RayServeException(f"the head runs no ingress (started with --serve-port -1), so "
                                    f"Deployment(name='{deployment_name}', app='{app_name}') cannot be called")
        with self._urls_lock:
            self._urls[key] = url
        return url

    def forget_url(self, app_name, deployment_name):
        with self._urls_lock:
            self._urls.pop((app_name, deployment_name), None)

    def forget_app(self, app_name):
        with self._urls_lock:
            for key in [k for k in self._urls if k[0] == app_name]:
                del self._urls[key]

    def close(self):
        self.executor.shutdown(wait=False, cancel_futures=True)


def current() -> ServeClient:
    """This process's ServeClient, made on first use (a driver connects with torus.init() when it has not)."""
    global _client
    with _lock:
        if _client is None:
            _client = ServeClient(_head_api())
        return _client


def existing():
    """This process's ServeClient if one was made, else None."""
    return _client


def reset():
    global _client
    with _lock:
        client, _client = _client, None
    if client is not None:
        client.close()


def _head_api():
    from torus._private import state as _st
    from torus._private import worker as _worker
    state = _st.current()
    if state is None and os.environ.get("TORUS_SERVE_REPLICA") == "1":
        address, token = os.environ.get("TORUS_DASHBOARD_ADDRESS"), os.environ.get("TORUS_TOKEN")
        if address and token:
            return HeadApi(address, token)
    state = state or _worker.state_or_init()
    return HeadApi(_worker.http_address(state), state.token)
