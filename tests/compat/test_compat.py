"""Each case of tests/compat/cases: the record under torus equals the record under Ray (see conftest.py)."""

import pytest

from conftest import CASES, case_names, results

PARAMS = [(path, name) for path in sorted(CASES.glob("*.py")) for name in case_names(path)]


@pytest.mark.parametrize("path,name", PARAMS, ids=[name for _, name in PARAMS])
def test_same_as_ray(path, name):
    by_system = results(path)
    ray_records, ray_log = by_system["ray"]
    torus_records, torus_log = by_system["torus"]
    ray = ray_records.get(name)
    if ray is None:
        pytest.fail(f"{name} did not run under Ray; its log ends:\n{ray_log[-3000:]}")
    if "error" in ray:
        pytest.fail(f"{name} fails under Ray itself (the case is wrong): {ray['error']}\n{ray.get('traceback', '')}")
    mine = torus_records.get(name)
    if mine is None:
        pytest.fail(f"{name} did not run under torus; its log ends:\n{torus_log[-3000:]}")
    if "error" in mine:
        pytest.fail(f"{name} raised under torus: {mine['error']}\n{mine.get('traceback', '')}\n"
                    f"(Ray recorded {ray['out']})")
    assert mine["out"] == ray["out"], f"{name}: torus recorded {mine['out']}, Ray {ray['out']}"
