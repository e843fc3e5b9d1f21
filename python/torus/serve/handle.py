"""ray.serve.handle: DeploymentHandle, DeploymentResponse and DeploymentResponseGenerator, as in Ray 2.60.

A call goes to the deployment's service through the head's ingress (the service's URL), which picks the READY
replica with the fewest requests in flight and tries another when one fails before answering; torus's call
protocol is in serve/_private/wire.py. The request starts when .remote() returns. A DeploymentResponse passed as
an argument (top-level, as Ray supports) of another call is resolved to its value before that call is sent.

A user's exception raised in the replica is raised here as RayTaskError(<its class>) (an instance of both, with
the replica's traceback), as Ray raises it. `.result()` blocks (not inside an asyncio loop: await instead);
`await response` does not block the loop. A DeploymentResponseGenerator yields a streaming call's items as the
replica yields them, by `for` outside a deployment and `async for` inside one.

Thread-safety: handles and responses may be used from any thread; the calls run on the process's pool of handle
threads (serve/_private/client.py).
"""

import asyncio
import concurrent.futures
import http.client
import time
import urllib.parse
import uuid
from typing import Any, Optional

from torus.serve._private import wire
from torus.serve._private.defaults import DEFAULT
from torus.serve.exceptions import BackPressureError, DeploymentUnavailableError, RayServeException, \
    RequestCancelledError

_SYNC_IN_LOOP = ("Sync methods should not be called from within an `asyncio` event loop. Use `await response` "
                 "instead.")
CALL_TIMEOUT_S = 86400


def _in_asyncio_loop():
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


class _HandleOptions:
    """A handle's call options (Ray's DynamicHandleOptions)."""

    def __init__(self, method_name="__call__", multiplexed_model_id="", session_id="", stream=False):
        self.method_name = method_name
        self.multiplexed_model_id = multiplexed_model_id
        self.session_id = session_id
        self.stream = stream

    def copy_and_update(self, **kwargs):
        fields = dict(self.__dict__)
        fields.update({k: v for k, v in kwargs.items() if v is not DEFAULT.VALUE})
        return _HandleOptions(**fields)

    def __eq__(self, other):
        return isinstance(other, _HandleOptions) and self.__dict__ == other.__dict__

    def __repr__(self):
        return f"DynamicHandleOptions({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class DeploymentID:
    """A deployment's name within its application."""

    def __init__(self, name: str, app_name: str = "default"):
        self.name = name
        self.app_name = app_name

    def __eq__(self, other):
        return isinstance(other, DeploymentID) and (self.name, self.app_name) == (other.name, other.app_name)

    def __hash__(self):
        return hash((self.name, self.app_name))

    def __str__(self):
        return f"Deployment(name='{self.name}', app='{self.app_name}')"

    __repr__ = __str__


class _DeploymentHandleBase:
    def __init__(self, deployment_name: str, app_name: str, *, handle_options: Optional[_HandleOptions] = None,
                 _handle_id: Optional[str] = None, **_ignored):
        self.deployment_id = DeploymentID(name=deployment_name, app_name=app_name)
        self.handle_options = handle_options or _HandleOptions()
        self.handle_id = _handle_id or uuid.uuid4().hex[:8]

    @property
    def deployment_name(self) -> str:
        return self.deployment_id.name

    @property
    def app_name(self) -> str:
        return self.deployment_id.app_name

    @property
    def is_initialized(self) -> bool:
        return True

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def shutdown(self):
        pass

    async def shutdown_async(self):
        pass

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(deployment='{self.deployment_name}')"

    @classmethod
    def _deserialize(cls, kwargs):
        return cls(**kwargs)

    def __reduce__(self):
        return self.__class__._deserialize, ({"deployment_name": self.deployment_name, "app_name": self.app_name,
                                              "handle_options": self.handle_options},)


class DeploymentHandle(_DeploymentHandleBase):
    """A handle used to make requests to a deployment at runtime (from the driver, or from another deployment's
    replica, where bound deployments arrive as handles)."""

    def options(self, *, method_name=DEFAULT.VALUE, multiplexed_model_id=DEFAULT.VALUE, session_id=DEFAULT.VALUE,
                stream=DEFAULT.VALUE, _prefer_local_routing=DEFAULT.VALUE, _by_reference=DEFAULT.VALUE,
                request_serialization=DEFAULT.VALUE, response_serialization=DEFAULT.VALUE) -> "DeploymentHandle":
        """A copy of this handle with the given call options (method_name, stream, multiplexed_model_id,
        session_id). _by_reference and the serialization options are accepted; calls always travel pickled."""
        for option, value in (("request_serialization", request_serialization),
                              ("response_serialization", response_serialization)):
            if value not in (DEFAULT.VALUE, "cloudpickle", "pickle"):
                raise ValueError(f"{option}: torus sends handle calls with cloudpickle; {value!r} is not taken")
        return DeploymentHandle(self.deployment_name, self.app_name,
                                handle_options=self.handle_options.copy_and_update(
                                    method_name=method_name, multiplexed_model_id=multiplexed_model_id,
                                    session_id=session_id, stream=stream),
                                _handle_id=self.handle_id)

    def remote(self, *args: Any, **kwargs: Any):
        """Starts a call of the handle's method; a DeploymentResponse (DeploymentResponseGenerator with
        stream=True)."""
        from torus.serve._private import client as _client
        serve_client = _client.current()
        request_id = uuid.uuid4().hex
        options = self.handle_options
        if options.stream:
            call = _StreamingCall(serve_client, self.deployment_id, options, args, kwargs, request_id)
            future = serve_client.executor.submit(call.open)
            return DeploymentResponseGenerator(future, call, request_id)
        future = serve_client.executor.submit(_call_unary, serve_client, self.deployment_id, options, args, kwargs,
                                              request_id)
        return DeploymentResponse(future, request_id)


def _resolve(args, kwargs):
    """Top-level DeploymentResponses among the arguments replaced by their values (as Ray resolves them)."""
    def value(x):
        if isinstance(x, DeploymentResponse):
            return x._future.result()
        if isinstance(x, DeploymentResponseGenerator):
            raise RayServeException("A `DeploymentResponseGenerator` cannot be passed to another `DeploymentHandle` "
                                    "call.")
        return x
    return [value(a) for a in args], {k: value(v) for k, v in kwargs.items()}


def _post(serve_client, deployment_id, options, args, kwargs, request_id):
    """The open HTTP response of a call (status 200), after the arguments are resolved."""
    args, kwargs = _resolve(args, kwargs)
    body = wire.encode_call(options.method_name, args, kwargs, options.stream, options.multiplexed_model_id,
                            request_id)
    for attempt in range(2):
        url = serve_client.url_of(deployment_id.app_name, deployment_id.name)
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=CALL_TIMEOUT_S)
        headers = {"Authorization": f"Bearer {serve_client.head.token}", "Content-Type": wire.CALL_CONTENT_TYPE,
                   "X-Request-ID": request_id}
        if options.multiplexed_model_id:
            headers["serve_multiplexed_model_id"] = options.multiplexed_model_id
        try:
            conn.request("POST", parts.path.rstrip("/") + wire.CALL_PATH, body=body, headers=headers)
            response = conn.getresponse()
        except OSError as e:
            conn.close()
            raise ConnectionError(f"the ingress at {parts.netloc} cannot be reached for {deployment_id}: {e}") from None
        if response.status == 200:
            response._torus_conn = conn  # closed with the response
            return response
        text = response.read().decode("utf-8", "replace")
        conn.close()
        if response.status == 404 and attempt == 0:
            serve_client.forget_url(deployment_id.app_name, deployment_id.name)  # redeployed elsewhere: look again
            continue
        _raise_for_status(response.status, text, deployment_id)
    raise DeploymentUnavailableError(deployment_id)


def _raise_for_status(status, text, deployment_id):
    if status == 503 and "queue" in text.lower() and "full" in text.lower():
        raise BackPressureError(num_queued_requests=-1, max_queued_requests=-1)
    if status in (502, 503, 404):
        raise DeploymentUnavailableError(deployment_id)
    raise RayServeException(f"the call to {deployment_id} failed with HTTP {status}: {text.strip()[:1000]}")


def _raise_error(error):
    from torus.exceptions import RayTaskError
    if isinstance(error, RayTaskError):
        raise error.as_instanceof_cause()
    raise error


def _call_unary(serve_client, deployment_id, options, args, kwargs, request_id):
    response = _post(serve_client, deployment_id, options, args, kwargs, request_id)
    try:
        kind, obj = wire.read_frame(response.read)
    finally:
        response.close()
        response._torus_conn.close()
    if kind == wire.ERROR:
        _raise_error(obj)
    return obj


class _StreamingCall:
    """One streaming call: opened on a handle thread, then read frame by frame by its generator's consumer."""

    def __init__(self, serve_client, deployment_id, options, args, kwargs, request_id):
        self.args = (serve_client, deployment_id, options, args, kwargs, request_id)
        self.response = None
        self.done = False

    def open(self):
        self.response = _post(*self.args)
        return self

    def next_item(self):
        if self.done:
            raise StopIteration
        try:
            kind, obj = wire.read_frame(self.response.read)
        except BaseException:
            self.close()
            raise
        if kind == wire.VALUE:
            return obj
        self.close()
        if kind == wire.ERROR:
            _raise_error(obj)
        raise StopIteration

    def close(self):
        self.done = True
        if self.response is not None:
            self.response.close()
            self.response._torus_conn.close()


class _DeploymentResponseBase:
    def __init__(self, future: concurrent.futures.Future, request_id: str):
        self._future = future
        self._request_id = request_id
        self._cancelled = False

    @property
    def request_id(self) -> str:
        return self._request_id

    @property
    def by_reference(self) -> bool:
        return False

    def cancel(self):
        """Best effort: a call not sent yet is dropped; one on a replica runs on (its answer is discarded)."""
        if self._cancelled:
            return
        self._cancelled = True
        self._future.cancel()

    def cancelled(self) -> bool:
        return self._cancelled

    def _check_cancelled(self):
        if self._cancelled:
            raise RequestCancelledError(self._request_id)


class DeploymentResponse(_DeploymentResponseBase):
    """A future-like object wrapping the result of a unary handle call: `.result()` or `await`."""

    def __await__(self):
        self._check_cancelled()
        try:
            result = yield from asyncio.wrap_future(self._future).__await__()
        except asyncio.CancelledError:
            if self._cancelled:
                raise RequestCancelledError(self._request_id) from None
            raise
        return result

    def __reduce__(self):
        raise RayServeException("`DeploymentResponse` is not serializable. If you are passing the "
                                "`DeploymentResponse` in a nested object (e.g. a list or dictionary) to a downstream "
                                "deployment handle call, that is no longer supported. Please only pass "
                                "`DeploymentResponse` objects as top level arguments.")

    def result(self, *, timeout_s: Optional[float] = None, _skip_asyncio_check: bool = False) -> Any:
        """The call's result, waiting up to timeout_s seconds (TimeoutError after). Raises the replica's error."""
        if not _skip_asyncio_check and _in_asyncio_loop():
            raise RuntimeError(_SYNC_IN_LOOP)
        self._check_cancelled()
        try:
            return self._future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError("Timed out waiting for result.") from None
        except concurrent.futures.CancelledError:
            raise RequestCancelledError(self._request_id) from None


class DeploymentResponseGenerator(_DeploymentResponseBase):
    """The items of a streaming handle call (handle.options(stream=True)), as the replica yields them."""

    def __init__(self, future, call, request_id):
        super().__init__(future, request_id)
        self._call = call

    def __await__(self):
        raise TypeError("`DeploymentResponseGenerator` cannot be awaited directly. Use `async for` or `await "
                        "response.__anext__() instead`.")

    def __aiter__(self):
        return self

    async def __anext__(self):
        self._check_cancelled()
        call = await asyncio.wrap_future(self._future)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(call.args[0].executor, _next_or_sentinel, call)
        except _End:
            raise StopAsyncIteration from None

    def __iter__(self):
        return self

    def __next__(self):
        if _in_asyncio_loop():
            raise RuntimeError("Sync methods should not be called from within an `asyncio` event loop. Use `async "
                               "for` or `await response.__anext__()` instead.")
        self._check_cancelled()
        try:
            call = self._future.result()
        except concurrent.futures.CancelledError:
            raise RequestCancelledError(self._request_id) from None
        return call.next_item()

    def result(self, *, timeout_s: Optional[float] = None, _skip_asyncio_check: bool = False) -> Any:
        raise TypeError("`DeploymentResponseGenerator` doesn't support `.result()`. Use iteration instead: `for item "
                        "in response` (outside deployments) or `async for item in response` (inside deployments).")

    def cancel(self):
        super().cancel()
        if self._future.done() and not self._future.cancelled() and self._future.exception() is None:
            self._future.result().close()


class _End(Exception):
    pass


def _next_or_sentinel(call):
    try:
        return call.next_item()
    except StopIteration:
        raise _End() from None


__all__ = ["DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator"]
