"""retry_exceptions as a list of exception types: only an error of one of them (or of a subclass) is retried, up to
max_retries; any other fails at its first attempt. Attempts are counted by an actor."""

import ray
from harness import case, out, raised


@ray.remote
class Attempts:
    def __init__(self):
        self.counts = {}

    def add(self, key):
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]

    def get(self, key):
        return self.counts.get(key, 0)


class Flaky(ValueError):
    pass


@ray.remote(max_retries=2, retry_exceptions=[ValueError])
def fails(attempts, key, kind):
    n = ray.get(attempts.add.remote(key))
    if kind == "value":
        raise ValueError(f"attempt {n}")
    if kind == "subclass":
        raise Flaky(f"attempt {n}")
    if kind == "recovers" and n < 3:
        raise ValueError(f"attempt {n}")
    if kind == "key":
        raise KeyError(f"attempt {n}")
    return n


def outcome(attempts, key, ref):
    e = raised(ray.get, ref)
    out(key, None if e is None else [isinstance(e, ValueError), isinstance(e, KeyError)],
        ray.get(attempts.get.remote(key)))


@case(timeout=120)
def only_listed_types_are_retried():
    attempts = Attempts.remote()
    for kind in ("value", "subclass", "key"):
        outcome(attempts, kind, fails.remote(attempts, kind, kind))
    ref = fails.remote(attempts, "recovers", "recovers")
    out(ray.get(ref), ray.get(attempts.get.remote("recovers")))


@case(timeout=120)
def options_replace_the_list():
    attempts = Attempts.remote()
    keys = fails.options(retry_exceptions=[KeyError])
    outcome(attempts, "key", keys.remote(attempts, "key", "key"))
    outcome(attempts, "value", keys.remote(attempts, "value", "value"))
    # An empty list retries nothing; True retries any error.
    outcome(attempts, "none", fails.options(retry_exceptions=[]).remote(attempts, "none", "value"))
    outcome(attempts, "any", fails.options(retry_exceptions=True).remote(attempts, "any", "key"))
