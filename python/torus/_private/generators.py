"""Generator tasks and actor methods (num_returns="streaming" or "dynamic")."""


def _unsupported(num_returns):
    return NotImplementedError(f"num_returns={num_returns!r}: generator tasks are not supported by this torus "
                               f"build; return a list instead")


def submit_generator_task(function, args, kwargs, num_returns):
    raise _unsupported(num_returns)


def call_generator_method(method, args, kwargs, num_returns):
    raise _unsupported(num_returns)
