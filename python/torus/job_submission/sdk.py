"""JobSubmissionClient: Ray 2.60's job client (ray.job_submission.JobSubmissionClient), with its signatures, return
types and errors, over the torus head's Jobs API (docs/rest.md, "Ray Jobs API").

Errors as in Ray: a request the head refuses raises RuntimeError("Request failed with status code C: TEXT."), an
unknown job among them (404 "Job ID does not exist"); a head that cannot be reached raises ConnectionError("Failed to
connect to Ray at address: ..."); a missing or wrong token raises AuthenticationError. Where the client looks for
the head, its token and its CA: _connection.py. A local working_dir or py_modules directory is packed and uploaded
first (_packaging.py), as Ray's client does.

Thread-safety: a client holds no connection; its methods may be called from several threads.
"""

import asyncio
import copy
import functools
import json
import logging
import os
import types
import urllib.parse
from typing import Any, AsyncIterator, Dict, List, Optional, Union

from torus.job_submission import _connection, _packaging
from torus.job_submission._models import JobDetails, JobStatus

logger = logging.getLogger(__name__)

# How long one read of a followed job's output waits for more (tail_job_logs), in ms.
_TAIL_WAIT_MS = 10_000


def _version(text):
    parts = []
    for piece in str(text).split("."):
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


class JobSubmissionClient:
    """A client of a cluster's Jobs API: submit, follow, stop, list and delete jobs.

    address: the head's HTTP API ("http://host:port", "https://host:port"); None or "auto" for this machine's
    cluster (TORUS_DASHBOARD_ADDRESS, else the latest session); "host:port" for a head's gRPC address. Always
    overridden by RAY_API_SERVER_ADDRESS or RAY_ADDRESS, as in Ray.
    cookies, headers: sent with every request (headers={"Authorization": "Bearer <token>"} gives the token).
    metadata: merged into every job's metadata (these values win).
    verify: True (the cluster's CA when known, else the system's), False, or a CA file or directory.
    """

    def __init__(self, address: Optional[str] = None, create_cluster_if_needed: bool = False,
                 cookies: Optional[Dict[str, Any]] = None, metadata: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, Any]] = None, verify: Optional[Union[str, bool]] = True, **kwargs):
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address must be a string, got {type(address)}")
        if not isinstance(create_cluster_if_needed, bool):
            raise TypeError(f"create_cluster_if_needed must be a bool, got {type(create_cluster_if_needed)}")
        if cookies is not None and not isinstance(cookies, dict):
            raise TypeError(f"cookies must be a dict, got {type(cookies)}")
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata)}")
        if headers is not None and not isinstance(headers, dict):
            raise TypeError(f"headers must be a dict, got {type(headers)}")
        if not isinstance(verify, (str, bool)):
            raise TypeError(f"verify must be a str or bool, got {type(verify)}")
        if kwargs:
            raise TypeError(f"JobSubmissionClient: unexpected keyword arguments {sorted(kwargs)} (Ray passes them to "
                            f"external address modules, which torus does not load)")
        given_token = next((str(v) for k, v in (headers or {}).items() if k.lower() == "authorization"), None)
        token_hint = given_token.split(" ", 1)[-1] if given_token else None
        self._address, session = _connection.resolve_url(address.rstrip("/") if address else address, token_hint)
        self._cookies = cookies
        self._default_metadata = metadata or {}
        self._headers = dict(headers or {})
        self._headers.update(_connection.auth_headers(self._headers, session))
        if cookies:
            self._headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        self._verify = verify
        self._ssl_context = _connection.ssl_context(self._address, verify, session)
        self._server_ray_version: Optional[str] = None
        self._check_connection_and_version(
            min_version="1.9",
            version_error_message="Jobs API is not supported on the Ray cluster. Please ensure the cluster is "
                                  "running Ray 1.9 or higher.")
        if _version(self._server_ray_version) < (2, 0):
            raise RuntimeError(f"Ray version {self._server_ray_version} is running on the cluster. Client Ray "
                               f"version 2.60.0 is not compatible with the Ray cluster. Please ensure the cluster is "
                               f"running Ray 2.0 or higher or downgrade the client Ray version.")

    # Requests.

    def _do_request(self, method: str, endpoint: str, *, data: Optional[bytes] = None,
                    json_data: Optional[dict] = None, timeout: Optional[float] = None) -> _connection.Response:
        headers = dict(self._headers)
        if json_data is not None:
            data = json.dumps(json_data).encode()
            headers["Content-Type"] = "application/json"
        return _connection.request(self._address + endpoint, method, headers, self._ssl_context, data=data,
                                   timeout=timeout)

    def _raise_error(self, r: _connection.Response):
        raise RuntimeError(f"Request failed with status code {r.status_code}: {r.text}.")

    def _check_connection_and_version(self, min_version: str = "1.9", version_error_message: str = None):
        if version_error_message is None:
            version_error_message = f"Please ensure the cluster is running Ray {min_version} or higher."
        r = self._do_request("GET", "/api/version")
        if r.status_code == 404:
            raise RuntimeError("Version check returned 404. " + version_error_message)
        if r.status_code != 200:
            self._raise_error(r)
        running = json.loads(r.text)["ray_version"]
        self._server_ray_version = running
        if _version(running) < _version(min_version):
            raise RuntimeError(f"Ray version {running} is running on the cluster. " + version_error_message)

    # Local code: packed and uploaded unless the head has it, then named by its URI.

    def _upload_if_needed(self, path: str, include_parent_dir: bool, excludes) -> str:
        name, blob = _packaging.pack_directory(path, excludes=excludes, include_parent_dir=include_parent_dir)
        endpoint = f"/api/packages/gcs/{name}"
        r = self._do_request("GET", endpoint)
        if r.status_code == 404:
            logger.info(f"Uploading package gcs://{name}.")
            r = self._do_request("PUT", endpoint, data=blob)
        if r.status_code != 200:
            self._raise_error(r)
        return f"gcs://{name}"

    def _local_dir(self, field: str, value) -> Optional[str]:
        """The local directory `value` names, or None for a URI (sent as is)."""
        if isinstance(value, types.ModuleType):
            paths = getattr(value, "__path__", None)
            if not paths:
                raise ValueError(f"{field}: module {value.__name__} is a single file; torus sends packages "
                                 f"(directories) only")
            return list(paths)[0]
        if not isinstance(value, str):
            raise TypeError(f"{field} must be a string, got {type(value)}")
        if "://" in value:
            return None
        if not os.path.isdir(value):
            raise ValueError(f"{field}: {value!r} is not a local directory; give a directory to upload, or the URI "
                             f"of a package the head holds (gcs://<name>.zip)")
        return value

    def _upload_local_code(self, runtime_env: Dict[str, Any]):
        excludes = runtime_env.get("excludes")
        if runtime_env.get("working_dir") is not None:
            local = self._local_dir("runtime_env.working_dir", runtime_env["working_dir"])
            if local is not None:
                runtime_env["working_dir"] = self._upload_if_needed(local, False, excludes)
        if runtime_env.get("py_modules") is not None:
            modules = runtime_env["py_modules"]
            if not isinstance(modules, list):
                raise TypeError(f"runtime_env.py_modules must be a list, got {type(modules)}")
            uploaded = []
            for i, module in enumerate(modules):
                local = self._local_dir(f"runtime_env.py_modules[{i}]", module)
                uploaded.append(module if local is None else self._upload_if_needed(local, True, excludes))
            runtime_env["py_modules"] = uploaded

    # Ray's API.

    def submit_job(self, *, entrypoint: str, job_id: Optional[str] = None,
                   runtime_env: Optional[Dict[str, Any]] = None, metadata: Optional[Dict[str, str]] = None,
                   submission_id: Optional[str] = None, entrypoint_num_cpus: Optional[Union[int, float]] = None,
                   entrypoint_num_gpus: Optional[Union[int, float]] = None, entrypoint_memory: Optional[int] = None,
                   entrypoint_resources: Optional[Dict[str, float]] = None,
                   entrypoint_label_selector: Optional[Dict[str, str]] = None) -> str:
        """Submits a job and returns its submission id (given, or "raysubmit_..." from the head)."""
        if job_id:
            logger.warning("job_id kwarg is deprecated. Please use submission_id instead.")
        if entrypoint_num_cpus or entrypoint_num_gpus or entrypoint_resources or entrypoint_label_selector:
            self._check_connection_and_version(
                min_version="2.2",
                version_error_message="`entrypoint_num_cpus`, `entrypoint_num_gpus`, `entrypoint_resources`, and "
                                      "`entrypoint_label_selector` kwargs are not supported on the Ray cluster. "
                                      "Please ensure the cluster is running Ray 2.2 or higher.")
        if entrypoint_memory:
            self._check_connection_and_version(
                min_version="2.8",
                version_error_message="`entrypoint_memory` kwarg is not supported on the Ray cluster. Please "
                                      "ensure the cluster is running Ray 2.8 or higher.")
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise TypeError(f"runtime_env must be a dict, got {type(runtime_env)}")
        runtime_env = copy.deepcopy(runtime_env or {})
        metadata = dict(metadata or {})
        metadata.update(self._default_metadata)
        self._upload_local_code(runtime_env)
        request = {"entrypoint": entrypoint, "submission_id": submission_id or job_id, "runtime_env": runtime_env,
                   "metadata": metadata, "entrypoint_num_cpus": entrypoint_num_cpus,
                   "entrypoint_num_gpus": entrypoint_num_gpus, "entrypoint_memory": entrypoint_memory,
                   "entrypoint_resources": entrypoint_resources,
                   "entrypoint_label_selector": entrypoint_label_selector}
        request = {k: v for k, v in request.items() if v is not None}
        r = self._do_request("POST", "/api/jobs/", json_data=request)
        if r.status_code != 200:
            self._raise_error(r)
        return json.loads(r.text)["submission_id"]

    def stop_job(self, job_id: str) -> bool:
        """Asks a job to stop (SIGTERM, then SIGKILL); True when it had not ended yet."""
        r = self._do_request("POST", f"/api/jobs/{_quote(job_id)}/stop")
        if r.status_code != 200:
            self._raise_error(r)
        return json.loads(r.text)["stopped"]

    def delete_job(self, job_id: str) -> bool:
        """Forgets a job that has ended; RuntimeError while it has not."""
        r = self._do_request("DELETE", f"/api/jobs/{_quote(job_id)}")
        if r.status_code != 200:
            self._raise_error(r)
        return json.loads(r.text)["deleted"]

    def get_job_info(self, job_id: str) -> JobDetails:
        r = self._do_request("GET", f"/api/jobs/{_quote(job_id)}")
        if r.status_code != 200:
            self._raise_error(r)
        return JobDetails(**json.loads(r.text))

    def list_jobs(self) -> List[JobDetails]:
        r = self._do_request("GET", "/api/jobs/")
        if r.status_code != 200:
            self._raise_error(r)
        return [JobDetails(**job) for job in json.loads(r.text)]

    def get_job_status(self, job_id: str) -> JobStatus:
        return self.get_job_info(job_id).status

    def get_job_logs(self, job_id: str) -> str:
        """The job's whole output so far."""
        r = self._do_request("GET", f"/api/jobs/{_quote(job_id)}/logs")
        if r.status_code != 200:
            self._raise_error(r)
        return json.loads(r.text)["logs"]

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        """Yields the job's output as it is written, from its start, until the job has ended and all of it was
        given. Each read waits at the head for output (GET /api/v0/jobs/{id}/logs?wait_ms=), in a thread of the
        loop's executor."""
        loop = asyncio.get_running_loop()
        offset = 0
        while True:
            endpoint = f"/api/v0/jobs/{_quote(job_id)}/logs?offset={offset}&wait_ms={_TAIL_WAIT_MS}"
            read = functools.partial(self._do_request, "GET", endpoint, timeout=_TAIL_WAIT_MS / 1000 + 30)
            r = await loop.run_in_executor(None, read)
            if r.status_code != 200:
                try:
                    text = json.loads(r.text)["error"]
                except (ValueError, KeyError, TypeError):
                    text = r.text
                raise RuntimeError(f"Request failed with status code {r.status_code}: {text}.")
            reply = json.loads(r.text)
            if reply["data"]:
                yield reply["data"]
            offset = reply["next_offset"]
            ended = reply["status"] not in JobStatus.__members__ or JobStatus(reply["status"]).is_terminal()
            if reply["finished"] and ended:
                return

    def get_version(self) -> str:
        r = self._do_request("GET", "/api/version")
        if r.status_code != 200:
            self._raise_error(r)
        return json.loads(r.text).get("version")

    def get_address(self) -> str:
        return self._address


def _quote(job_id) -> str:
    return urllib.parse.quote(str(job_id), safe="")
