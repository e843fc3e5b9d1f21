"""A replica's HTTP server (an ASGI app run by uvicorn on $TORUS_SERVE_PORT), behind the head's ingress:

    GET  /-/healthz   200 "success" once the deployment is constructed and its check_health() (if any) passes
                      within health_check_timeout_s; 503 with the error otherwise (the head replaces a replica
                      that fails 3 in a row)
    POST /-/call      a DeploymentHandle's call (serve/_private/wire.py); 401 without the cluster token
    anything else     the ingress deployment's HTTP: its @serve.ingress ASGI app (FastAPI), or __call__ (the
                      function) with a starlette Request, whose result is sent as Ray sends it (a Response as
                      is; str as text/plain; bytes as is; None as empty; other values as JSON; a generator's
                      items one chunk each). A non-ingress deployment answers 404.

The ingress strips the route prefix and says it in X-Forwarded-Prefix; the app sees Ray's scope: root_path the
prefix, path the full path. At most max_ongoing_requests calls run at once; more wait here.

Thread-safety: runs on uvicorn's event loop.
"""

import asyncio
import hmac
import inspect
import json
import sys
import traceback

from torus.serve._private import wire
from torus.serve._private.user_callable import task_error


def _header(scope, name):
    name = name.lower().encode()
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _read_body(receive):
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _send_simple(send, status, body, content_type=b"text/plain; charset=utf-8"):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def to_body(obj):
    """(body bytes, content type) of a value returned over HTTP, as Ray converts it."""
    if obj is None:
        return b"", b"text/plain"
    if isinstance(obj, bytes):
        return obj, b"text/plain"
    if isinstance(obj, str):
        return obj.encode("utf-8"), b"text/plain; charset=utf-8"
    try:
        from fastapi.encoders import jsonable_encoder
        obj = jsonable_encoder(obj)
    except ImportError:
        pass
    return json.dumps(obj, separators=(",", ":")).encode(), b"application/json"


class ReplicaServer:
    def __init__(self, user, *, app_name, deployment_name, is_ingress, token, max_ongoing_requests,
                 health_check_timeout_s, construct):
        self.user = user
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.is_ingress = is_ingress
        self.token = token
        self.health_check_timeout_s = health_check_timeout_s
        self.slots = asyncio.Semaphore(max(1, max_ongoing_requests))
        self.ready = False
        self.construct = construct
        self.lifespan = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets do not pass the ingress
        path = scope["path"]
        if path == "/-/healthz":
            await self._health(send)
        elif path == wire.CALL_PATH and scope["method"] == "POST":
            await self._call(scope, receive, send)
        elif not self.is_ingress:
            await _send_simple(send, 404, f"deployment {self.deployment_name} of application {self.app_name} is not "
                                          f"its ingress; call it with a DeploymentHandle".encode())
        else:
            async with self.slots:
                await self._http(scope, receive, send)

    async def startup(self):
        """Constructs the deployment (and starts its ASGI app's lifespan); the server serves after this."""
        await self.construct()
        if self.user.asgi_app is not None:
            await self._user_lifespan_startup()
        self.ready = True

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    if self.lifespan is not None:
                        await self.lifespan.shutdown()
                    await self.user.destroy()
                except Exception:  # noqa: BLE001 - shutting down anyway
                    traceback.print_exc()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _user_lifespan_startup(self):
        from uvicorn.config import Config
        from uvicorn.lifespan.on import LifespanOn
        self.lifespan = LifespanOn(Config(self.user.asgi_app, lifespan="on"))
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise RuntimeError("ASGI lifespan startup failed. Check replica logs for details.")

    async def _health(self, send):
        if not self.ready:
            await _send_simple(send, 503, b"the deployment is not constructed yet")
            return
        try:
            await asyncio.wait_for(self.user.check_health(), self.health_check_timeout_s)
        except asyncio.TimeoutError:
            await _send_simple(send, 503, f"check_health did not return within {self.health_check_timeout_s} s"
                               .encode())
            return
        except Exception as e:  # noqa: BLE001 - any failure of the user's check is unhealthy
            await _send_simple(send, 503, f"check_health failed: {type(e).__name__}: {e}".encode())
            return
        await _send_simple(send, 200, b"success")

    async def _call(self, scope, receive, send):
        given = _header(scope, "authorization") or ""
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            await _send_simple(send, 401, b"a handle call needs the cluster token")
            return
        body = await _read_body(receive)
        try:
            call = wire.decode_call(body)
        except Exception as e:  # noqa: BLE001 - a body that does not unpickle is the caller's error
            await _send_simple(send, 400, f"the call cannot be read: {type(e).__name__}: {e}".encode())
            return
        method = call["method"]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", wire.RESULT_CONTENT_TYPE.encode())]})
        async with self.slots:
            try:
                if call["stream"]:
                    async for item in self.user.stream(method, call["args"], call["kwargs"]):
                        await send({"type": "http.response.body", "body": wire.frame(wire.VALUE, item),
                                    "more_body": True})
                    out = wire.frame(wire.DONE)
                else:
                    value = await self.user.call(method, call["args"], call["kwargs"])
                    out = wire.frame(wire.VALUE, value)
            except Exception as e:  # noqa: BLE001 - the user's error goes back to the caller
                out = self._error_frame(e, method)
        await send({"type": "http.response.body", "body": out, "more_body": False})

    def _error_frame(self, error, method):
        wrapped = task_error(error, self.app_name, self.deployment_name, method)
        try:
            return wire.frame(wire.ERROR, wrapped)
        except Exception as e:  # noqa: BLE001 - a result or error that cannot be pickled
            return wire.frame(wire.ERROR, task_error(
                TypeError(f"the result of {method} could not be sent: {e}"), self.app_name, self.deployment_name,
                method))

    async def _http(self, scope, receive, send):
        prefix = _header(scope, "x-forwarded-prefix") or ""
        if prefix == "/":
            prefix = ""
        scope = dict(scope, root_path=prefix, path=prefix + scope["path"],
                     raw_path=(prefix + scope["path"]).encode())
        if self.user.asgi_app is not None:
            from torus.serve.context import _get_internal_replica_context  # noqa: F401 - routes read it
            await self.user.asgi_app(scope, receive, send)
            return
        try:
            from starlette.requests import Request
            from starlette.responses import Response
        except ImportError as e:
            raise ImportError("a Serve replica needs starlette to pass HTTP requests to __call__; install it "
                              "(pip install starlette, or Debian's python3-starlette)") from e
        try:
            result = await self.user._invoke(self.user.method("__call__"), (Request(scope, receive),), {})
            if isinstance(result, Response):
                await result(scope, receive, send)
            elif inspect.isgenerator(result) or inspect.isasyncgen(result):
                await self._send_stream(result, send)
            else:
                body, content_type = to_body(result)
                await _send_simple(send, 200, body, content_type)
        except Exception:  # noqa: BLE001 - as Ray: 500, the traceback in the replica's log
            traceback.print_exc(file=sys.stderr)
            await _send_simple(send, 500, b"Internal Server Error")

    async def _send_stream(self, result, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        if inspect.isasyncgen(result):
            async for item in result:
                await send({"type": "http.response.body", "body": to_body(item)[0], "more_body": True})
        else:
            done = object()
            while True:
                item = await self.user._run_sync(next, result, done)
                if item is done:
                    break
                await send({"type": "http.response.body", "body": to_body(item)[0], "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
