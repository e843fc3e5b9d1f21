"""Remote functions (as ray.remote_function): `@torus.remote` on a function, `.options()`, `.remote()`."""

import functools
import inspect

from torus._private import generators
from torus._private import options as opt
from torus._private import serialization
from torus._private import worker
from torus._private.arguments import wire_args
from torus._private.object_ref import ObjectRef
from torus._private.remote_base import RemoteBase


class RemoteFunction(RemoteBase):
    """A function run as a task: `f.remote(*args)` returns an ObjectRef (a list of them with num_returns > 1)."""

    def __init__(self, function, options):
        self._is_generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
        super().__init__(function, options)
        self._validate(options, in_options=False)
        self._function_name = self._name
        functools.update_wrapper(self, function)

    def _validate(self, options, in_options):
        opt.validate_task_options(options, in_options, self._is_generator)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Remote functions cannot be called directly. Instead of running '{self._name}()', try "
                        f"'{self._name}.remote()'.")

    def remote(self, *args, **kwargs):
        state = worker.state_or_init()
        opts = self._default_options
        num_returns, generator = generators.call_shape(opts.get("num_returns"), self._is_generator)
        function_id, blob = self._code()
        resources = opt.resources(opts, default_cpus=1)
        env, working_dir = opt.runtime_env(opts, state.job_runtime_env)
        selector, fallbacks, strategy, group, bundle = opt.placement(opts)
        retry = opts.get("retry_exceptions", False)
        retry_types = list(retry) if isinstance(retry, (list, tuple)) else None
        max_retries = opts.get("max_retries")
        ids = state.core.submit(worker.new_task_id(), opts.get("name") or self._name, function_id, blob,
                                wire_args(args, kwargs), max(num_returns, 1), resources, env, working_dir,
                                3 if max_retries is None else max_retries, bool(retry), selector, strategy, group,
                                bundle, fallback_selectors=fallbacks,
                                retry_exception_types=serialization.dumps(tuple(retry_types)) if retry_types else b"",
                                generator=generator)
        refs = [ObjectRef(i, state.core.address) for i in ids]
        if generator == "streaming":
            return generators.ObjectRefGenerator(refs[0])
        if num_returns == 0:
            return None
        return refs[0] if num_returns == 1 else refs
