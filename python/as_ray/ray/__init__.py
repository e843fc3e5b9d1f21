"""`ray` resolved to torus: with this folder first on PYTHONPATH, a Ray program's `import ray` (and `import ray.X`)
imports torus's modules of the same names."""

import sys

from torus._private import ray_alias

ray_alias.install()
sys.modules[__name__] = sys.modules["torus"]
