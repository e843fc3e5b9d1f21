"""@serve.ingress's parts: freezing the ASGI app (a copy, so later changes to the app object do not reach the
deployment, as Ray freezes it) and FastAPI class-based views (routes defined on the class's methods get the
replica's instance as `self`, as Ray's make_fastapi_class_based_view gives it). Run at decoration time.
"""

import inspect

from torus.serve._private import pickling

_CLASS_METADATA = ("__name__", "__qualname__", "__module__", "__doc__")


def copy_class_metadata(wrapper_cls, target_cls):
    for attr in _CLASS_METADATA:
        if hasattr(target_cls, attr):
            setattr(wrapper_cls, attr, getattr(target_cls, attr))
    annotations = getattr(target_cls, "__annotations__", None)
    if annotations:
        merged = dict(wrapper_cls.__dict__.get("__annotations__", {}))
        for key, value in annotations.items():
            merged.setdefault(key, value)
        wrapper_cls.__annotations__ = merged
    wrapper_cls.__wrapped__ = target_cls


def freeze(app, cls):
    """What the replica builds its ASGI app from: the app (a frozen copy), a builder function, or None."""
    if _is_fastapi(app):
        make_class_based_view(app, cls)
    if app is None or inspect.isfunction(app):
        return app
    try:
        return pickling.loads(pickling.dumps(app))
    except Exception as e:
        raise TypeError(f"Failed to serialize the ASGI app: {e}") from e


def _is_fastapi(app):
    try:
        from fastapi import APIRouter, FastAPI
    except ImportError:
        return False
    return isinstance(app, (FastAPI, APIRouter))


def _walk_routes(router, prefix=""):
    from fastapi.routing import APIRoute, APIWebSocketRoute
    try:
        from fastapi.routing import _IncludedRouter
    except ImportError:
        _IncludedRouter = None
    for route in router.routes:
        if isinstance(route, (APIRoute, APIWebSocketRoute)):
            yield route, router, prefix
        elif _IncludedRouter is not None and isinstance(route, _IncludedRouter):
            yield from _walk_routes(route.original_router, prefix + route.include_context.prefix)


async def _current_servable_instance():
    from torus.serve.api import get_replica_context
    return get_replica_context().servable_object


def make_class_based_view(fastapi_app, cls):
    """The routes whose endpoints are `cls`'s methods take `self` from the replica (Depends), the rest of their
    parameters keyword-only; routes of other classes' views are removed."""
    from fastapi import APIRouter, Depends
    from starlette.routing import compile_path

    from torus.serve.exceptions import RayServeException
    bases = [base for base in cls.__mro__ if base is not object]
    mine = [(route, parent, prefix) for route, parent, prefix in _walk_routes(fastapi_app)
            if any(route.endpoint.__qualname__.startswith(base.__qualname__ + ".") for base in bases)]
    router = APIRouter()
    for route, parent, prefix in mine:
        parent.routes.remove(route)
        if prefix:
            route.path = prefix + route.path
            route.path_regex, route.path_format, route.param_convertors = compile_path(route.path)
        signature = inspect.signature(route.endpoint)
        params = list(signature.parameters.values())
        if not params:
            raise RayServeException("Methods in FastAPI class-based view must have ``self`` as their first argument.")
        new_params = [params[0].replace(default=Depends(_current_servable_instance))] + [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[1:]]
        route.endpoint.__signature__ = signature.replace(parameters=new_params)
        route.endpoint._serve_cls = cls
        router.routes.append(route)
    fastapi_app.include_router(router)
    for route, parent, _ in list(_walk_routes(fastapi_app)):
        owner = getattr(route.endpoint, "_serve_cls", None)
        if owner is not None and owner != cls:
            parent.routes.remove(route)
