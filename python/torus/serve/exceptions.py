"""ray.serve.exceptions: the errors Serve raises, with Ray 2.60's classes, bases and messages.

RayServeException is the base of Serve's own errors (an application or deployment that does not exist, a call
from the wrong place). A user's exception raised in a replica reaches the caller as RayTaskError(<its class>)
(torus.exceptions), as in Ray, not as one of these.
"""

from typing import Optional

from torus.exceptions import TaskCancelledError


class RayServeException(Exception):
    pass


class gRPCStatusError(RayServeException):  # noqa: N801 - Ray's name
    """Wraps an exception with the gRPC status code a user set. torus serves no gRPC; kept for code that names it."""

    def __init__(self, original_exception: BaseException, code=None, details: Optional[str] = None):
        self._original_exception = original_exception
        self._grpc_code = code
        self._grpc_details = details
        super().__init__(str(original_exception))

    @property
    def original_exception(self) -> BaseException:
        return self._original_exception

    @property
    def grpc_code(self):
        return self._grpc_code

    @property
    def grpc_details(self) -> Optional[str]:
        return self._grpc_details

    def __str__(self) -> str:
        return str(self._original_exception)


class BackPressureError(RayServeException):
    """Raised when a deployment's queue of requests is full (torus: the ingress answered 503 for a full queue)."""

    def __init__(self, num_queued_requests: int, max_queued_requests: int, status_code: int = 503,
                 retry_after_s: Optional[float] = None):
        super().__init__(num_queued_requests, max_queued_requests, status_code, retry_after_s)
        self._message = (f"Request dropped due to backpressure (num_queued_requests={num_queued_requests}, "
                         f"max_queued_requests={max_queued_requests}).")
        self._status_code = status_code
        self._retry_after_s = retry_after_s

    def __str__(self) -> str:
        return self._message

    @property
    def message(self) -> str:
        return self._message

    @property
    def status_code(self) -> int:
        return self._status_code

    @property
    def retry_after_s(self) -> Optional[float]:
        return self._retry_after_s


class RequestCancelledError(RayServeException, TaskCancelledError):
    """Raised when a Serve request is cancelled."""

    def __init__(self, request_id: Optional[str] = None):
        self._request_id = request_id

    def __str__(self):
        if self._request_id:
            return f"Request {self._request_id} was cancelled."
        return "Request was cancelled."


class DeploymentUnavailableError(RayServeException):
    """Raised when a deployment cannot take requests (torus: its service has no replica and none comes in time)."""

    def __init__(self, deployment_id):
        self._deployment_id = deployment_id

    @property
    def message(self) -> str:
        return f"{self._deployment_id} is unavailable because it failed to deploy."

    def __str__(self):
        return self.message


class ReplicaUnavailableError(RayServeException):
    """Raised when the replica a request went to is gone before answering."""

    def __init__(self, replica_id: str):
        self._replica_id = replica_id

    @property
    def message(self) -> str:
        return f"Replica {self._replica_id} is no longer available."

    def __str__(self):
        return self.message
