"""docs/python.md's API table matches the code: every public name of the Ray modules below has a row, and each row's
verdict holds — "same": torus has it with Ray's signature; "different": torus has it and the row says how;
"missing": torus has no such name and the row says why.

Runs in the development venv, where Ray itself is importable beside torus (torus never imports it).
"""

import importlib
import inspect
import re
import sys

import pytest

from conftest import REPO

MODULES = ["ray", "ray.util", "ray.util.tpu", "ray.util.state", "ray.util.placement_group",
           "ray.util.scheduling_strategies", "ray.util.queue", "ray.util.actor_pool", "ray.exceptions", "ray.actor",
           "ray.runtime_context", "ray.job_submission", "ray.train", "ray.train.v2.jax", "ray.serve"]
DOC = REPO / "docs" / "python.md"
_ROW = re.compile(r"^\|\s*`(ray(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`\s*\|\s*(same|different|missing)\s*\|(.*)\|\s*$")


def table():
    text = DOC.read_text()
    start, end = text.index("<!-- api-table:start -->"), text.index("<!-- api-table:end -->")
    rows = {}
    for line in text[start:end].splitlines():
        m = _ROW.match(line.strip())
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3).strip())
    return rows


def public_names(module_name):
    """What a Ray module offers its users: its __all__, else what it defines and does not mark private."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and
                 getattr(v, "__module__", None) == module_name and (inspect.isclass(v) or inspect.isfunction(v))]
        names += [n for n, v in vars(module).items()
                  if n.isupper() and not n.startswith("_") and isinstance(v, (int, float, str, tuple))]
    return sorted(set(n for n in names if not n.startswith("_")))


def resolve(name):
    """The object a dotted name stands for: attributes first (ray.util.placement_group is the function), modules
    where no attribute has the name; None when there is none."""
    parts = name.split(".")
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return None
    for i, part in enumerate(parts[1:], start=2):
        attr = getattr(obj, part, None)
        rest = parts[i:]
        # An attribute that shadows its submodule (ray.util.placement_group) stands for the submodule when the rest
        # of the name is the submodule's (ray.util.placement_group.NODE_ID_LABEL_KEY).
        if attr is not None and (not rest or inspect.ismodule(attr) or hasattr(attr, rest[0])):
            obj = attr
            continue
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            if attr is None:
                return None
            obj = attr
    return obj


def torus_object(ray_name):
    """torus's object for a Ray name (ray.a.b -> torus.a.b), or None."""
    return resolve("torus" + ray_name[len("ray"):])


def ray_object(ray_name):
    return resolve(ray_name)


def signature_of(obj):
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    return [(p.name, p.kind, None if p.default is inspect.Parameter.empty else repr(p.default))
            for p in sig.parameters.values() if p.name not in ("self", "cls")]


def test_every_public_name_has_a_row():
    rows = table()
    missing = [f"{m}.{n}" for m in MODULES for n in public_names(m)
               if f"{m}.{n}" not in rows]
    assert not missing, f"docs/python.md's API table has no row for: {', '.join(missing)}"


@pytest.mark.parametrize("name", sorted(table()))
def test_row_holds(name):
    status, note = table()[name]
    mine = torus_object(name)
    if status == "missing":
        assert note, f"{name}: a missing name says why"
        assert mine is None, f"{name} is marked missing but torus has it: mark it same or different"
        return
    assert mine is not None, f"{name} is marked {status} but torus has no such name"
    if status == "different":
        assert note, f"{name}: a different name says how it differs"
        return
    theirs = ray_object(name)
    if callable(theirs) and callable(mine):
        assert signature_of(mine) == signature_of(theirs), (
            f"{name} is marked same but its signature differs: torus {signature_of(mine)}, "
            f"Ray {signature_of(theirs)}")


def test_readme_counts_the_cases():
    from conftest import CASES, case_names
    count = sum(len(case_names(p)) for p in CASES.glob("*.py"))
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"holds {count} Ray programs" in readme, f"README.md should say tests/compat holds {count} Ray programs"
