"""`ray` resolved to `torus`: after install(), `import ray` and `import ray.X.Y` give the modules torus.X.Y (the same
module objects, so classes and state are shared), and a module torus lacks fails naming what Ray would have had.

A program runs under torus unchanged with python/as_ray first on PYTHONPATH (its `ray` package calls install());
the workers of a driver that did so install it too (TORUS_RAY_ALIAS=1 in their environment).
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

ENV = "TORUS_RAY_ALIAS"


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        self.own_loader = getattr(module, "__loader__", None)
        return module

    def exec_module(self, module):
        # The torus module ran already; it keeps its own spec (the import system set the alias's on it).
        module.__spec__ = self.own_spec
        module.__loader__ = self.own_loader


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        torus_name = "torus" + fullname[len("ray"):]
        try:
            found = importlib.util.find_spec(torus_name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(f"No module named {fullname!r}: torus has no counterpart of it "
                                      f"(docs/python.md lists what torus provides of Ray's API)", name=fullname)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(torus_name),
                                              is_package=found.submodule_search_locations is not None)


def install():
    """Makes `ray` (and every `ray.X`) import as torus; idempotent."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
    import torus
    sys.modules["ray"] = torus
    os.environ[ENV] = "1"
