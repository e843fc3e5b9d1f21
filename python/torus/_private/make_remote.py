"""@torus.remote (as ray.remote): a function becomes a RemoteFunction, a class an ActorClass."""

import inspect

from torus._private import options as opt


def remote(*args, **kwargs):
    """@torus.remote or @torus.remote(num_cpus=..., resources={"TPU": 1}, ...) on a function or a class."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _make(args[0], {})
    if args:
        raise TypeError(opt.REMOTE_ARGS_ERROR)
    for key in kwargs:
        if key not in opt.VALID_OPTIONS:
            raise TypeError(opt.REMOTE_ARGS_ERROR)
    return lambda f: _make(f, kwargs)


def _make(f, options):
    if inspect.isclass(f):
        from torus.actor import ActorClass
        return ActorClass(f, options)
    if inspect.isfunction(f) or inspect.isbuiltin(f) or callable(f):
        from torus.remote_function import RemoteFunction
        return RemoteFunction(f, options)
    raise TypeError("The @ray.remote decorator must be applied to either a function or a class.")
