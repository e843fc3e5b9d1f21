"""The build of an application (as ray.serve._private.build_app): the graph of bound deployments becomes a list of
deployments, each with a name unique in the application, and every Application among a deployment's constructor
arguments is replaced by a DeploymentHandle to that deployment.

Names: a deployment bound twice (two Application objects of the same Deployment) gets Ray's suffixes, Model then
Model_1, Model_2. Applications are found in the arguments themselves and inside lists, tuples and dicts (at any
depth); Ray also finds them inside other objects' attributes, torus does not. Pure functions; thread-safe.
"""

from dataclasses import dataclass
from typing import Dict, List


@dataclass
class BuiltApplication:
    name: str
    route_prefix: object  # str or None
    ingress_deployment_name: str
    deployments: list  # Deployments, the ingress last


def build_app(app, *, name, route_prefix, make_handle) -> BuiltApplication:
    """`make_handle(deployment_name, app_name)` makes the handle that stands for a bound deployment."""
    names: Dict[int, str] = {}
    handles: Dict[int, object] = {}
    deployments: List = []
    _build(app, name, names, handles, deployments, make_handle, keep_alive=[])
    return BuiltApplication(name=name, route_prefix=route_prefix, ingress_deployment_name=names[id(app)],
                            deployments=deployments)


def _build(app, app_name, names, handles, deployments, make_handle, keep_alive):
    if id(app) in handles:
        return
    keep_alive.append(app)  # ids stay unique while the build runs
    bound = app._bound_deployment
    children = []
    _find_apps((bound.init_args, bound.init_kwargs), children)
    for child in children:
        _build(child, app_name, names, handles, deployments, make_handle, keep_alive)
    args = _replace(bound.init_args, handles)
    kwargs = _replace(bound.init_kwargs, handles)
    final = bound.options(name=_unique_name(app, names), _init_args=tuple(args), _init_kwargs=kwargs,
                          _internal=True)
    handles[id(app)] = make_handle(final.name, app_name)
    deployments.append(final)


def _is_app(obj):
    from torus.serve.deployment import Application
    return isinstance(obj, Application)


def _find_apps(obj, found):
    if _is_app(obj):
        if all(f is not obj for f in found):
            found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _find_apps(item, found)
    elif isinstance(obj, dict):
        for item in obj.values():
            _find_apps(item, found)


def _replace(obj, handles):
    if _is_app(obj):
        return handles[id(obj)]
    if isinstance(obj, list):
        return [_replace(item, handles) for item in obj]
    if isinstance(obj, tuple):
        items = [_replace(item, handles) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, dict):
        return {k: _replace(item, handles) for k, item in obj.items()}
    return obj


def _unique_name(app, names):
    if id(app) in names:
        return names[id(app)]
    base = app._bound_deployment.name
    name, idx = base, 1
    while name in names.values():
        name = f"{base}_{idx}"
        idx += 1
    names[id(app)] = name
    return name
