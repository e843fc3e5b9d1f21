"""The user's deployment inside a replica: constructing it (a sync or async constructor, then reconfigure with
user_config), calling its methods (async ones on the replica's event loop, sync ones on its threads, as Ray runs
them), its generators, its health check and its destructor.

Thread-safety: used on the replica's event loop; sync user code runs on `executor` threads (at most
max_ongoing_requests at once, as the replica admits no more).
"""

import asyncio
import concurrent.futures
import functools
import inspect
import os
import socket
import traceback

from torus.serve.exceptions import RayServeException

ASGI_ATTR = "_torus_serve_asgi_app"
_OWN_DIRS = {os.path.dirname(os.path.abspath(__file__)),
             os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
             os.path.dirname(os.path.abspath(asyncio.__file__)),
             os.path.dirname(os.path.abspath(concurrent.futures.__file__))}


class UserCallable:
    def __init__(self, deployment, app_name, max_threads):
        self.deployment = deployment
        self.app_name = app_name
        self.target = deployment.func_or_class
        self.is_function = inspect.isfunction(self.target) or not inspect.isclass(self.target)
        self.instance = None
        self.asgi_app = None
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, max_threads),
                                                              thread_name_prefix="torus-serve-user")

    # Construction.

    async def construct(self):
        rc = self.deployment._replica_config
        if self.is_function:
            self.instance = self.target
        else:
            cls = self.target
            if inspect.iscoroutinefunction(cls.__init__):
                obj = cls.__new__(cls)
                await cls.__init__(obj, *rc.init_args, **rc.init_kwargs)
            else:
                obj = await self._run_sync(functools.partial(cls, *rc.init_args, **rc.init_kwargs))
            self.instance = obj
        user_config = self.deployment._deployment_config.user_config
        if user_config is not None:
            await self.reconfigure(user_config)
        if not self.is_function and hasattr(type(self.instance), ASGI_ATTR):
            self.asgi_app = await self._asgi_app_of(getattr(type(self.instance), ASGI_ATTR))

    async def reconfigure(self, user_config):
        method = getattr(self.instance, "reconfigure", None) if not self.is_function else None
        if method is None:
            raise RayServeException(f"user_config specified but deployment '{self.deployment.name}' missing "
                                    f"`reconfigure` method.")
        await self._invoke(method, (user_config,), {})

    async def _asgi_app_of(self, app_or_builder):
        if app_or_builder is None:
            built = self.instance.__serve_build_asgi_app__()
            return await built if inspect.isawaitable(built) else built
        if inspect.isfunction(app_or_builder):
            built = app_or_builder()
            return await built if inspect.isawaitable(built) else built
        return app_or_builder

    # Calls.

    def method(self, name):
        if self.is_function:
            if name != "__call__":
                raise RayServeException(f"Tried to call a method '{name}' that does not exist. Available methods: "
                                        f"['__call__'].")
            return self.instance
        method = getattr(self.instance, name, None)
        if method is None or not callable(method):
            methods = [a for a in dir(self.instance)
                       if not a.startswith("__") and callable(getattr(self.instance, a, None))]
            raise RayServeException(f"Tried to call a method '{name}' that does not exist. Available methods: "
                                    f"{methods}.")
        return method

    async def _run_sync(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _invoke(self, fn, args, kwargs):
        """The call's result: awaited for async functions, run on a thread for sync ones. A generator or async
        generator comes back unstarted."""
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            result = fn(*args, **kwargs)
        elif inspect.isgeneratorfunction(fn):
            return fn(*args, **kwargs)
        else:
            result = await self._run_sync(functools.partial(fn, *args, **kwargs))
        if inspect.isawaitable(result):
            result = await result
        return result

    async def call(self, name, args, kwargs):
        """A unary call's value; TypeError for a generator (Ray's words)."""
        result = await self._invoke(self.method(name), args, kwargs)
        if inspect.isgenerator(result) or inspect.isasyncgen(result):
            raise TypeError(f"Method '{name}' returned a generator. You must use `handle.options(stream=True)` to "
                            f"call generators on a deployment.")
        return result

    async def stream(self, name, args, kwargs):
        """A streaming call's items as an async iterator; TypeError when the method returns no generator."""
        result = await self._invoke(self.method(name), args, kwargs)
        if inspect.isasyncgen(result):
            async for item in result:
                yield item
        elif inspect.isgenerator(result):
            done = object()
            while True:
                item = await self._run_sync(next, result, done)
                if item is done:
                    break
                yield item
        else:
            raise TypeError(f"Called method '{name}' with `handle.options(stream=True)` but it did not return a "
                            f"generator.")

    async def check_health(self):
        method = getattr(self.instance, "check_health", None) if not self.is_function else None
        if method is not None:
            await self._invoke(method, (), {})

    async def destroy(self):
        if self.is_function or self.instance is None:
            return
        destructor = getattr(type(self.instance), "__del__", None)
        if destructor is not None:
            result = destructor(self.instance)
            if inspect.isawaitable(result):
                await result
        self.executor.shutdown(wait=False)


def task_error(exc, app_name, deployment_name, method_name):
    """The RayTaskError a caller raises for `exc` raised by the user's code in this replica."""
    from torus.exceptions import RayTaskError
    tb = exc.__traceback__
    # The replica's own frames (this package's) come before the user's: the caller sees the user's.
    while tb is not None and os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) in _OWN_DIRS:
        tb = tb.tb_next
    trace = "".join(traceback.format_exception(type(exc), exc, tb))
    proctitle = f"ray::ServeReplica:{app_name}:{deployment_name}"
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return RayTaskError(f"ServeReplica:{app_name}:{deployment_name}.{method_name}", trace, exc,
                        proctitle=f"{proctitle}.{method_name}", pid=os.getpid(), ip=ip)
