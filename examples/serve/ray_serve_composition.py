"""Model composition, as in Ray Serve's guide: an ingress deployment holds handles to two others and chains their
calls; a DeploymentResponse passed to another call is resolved first, without a round trip through the caller.

    PYTHONPATH=python/as_ray:python:build/python .venv/bin/python examples/serve/ray_serve_composition.py

The application computes (x + 2) * 3 over HTTP (POST a JSON number) and through a handle. The last line printed
is JSON of what it got back.
"""

import argparse
import json
import urllib.request

from ray import serve
from ray.serve.handle import DeploymentHandle


@serve.deployment
class Adder:
    def __init__(self, increment: int):
        self.increment = increment

    def add(self, value: int) -> int:
        return value + self.increment


@serve.deployment
class Multiplier:
    def __init__(self, factor: int):
        self.factor = factor

    def multiply(self, value: int) -> int:
        return value * self.factor


@serve.deployment
class Pipeline:
    def __init__(self, adder: DeploymentHandle, multiplier: DeploymentHandle):
        self.adder = adder
        self.multiplier = multiplier

    async def compute(self, value: int) -> int:
        added = self.adder.add.remote(value)
        return await self.multiplier.multiply.remote(added)

    async def __call__(self, request) -> dict:
        value = await request.json()
        return {"input": value, "output": await self.compute(value)}


app = Pipeline.bind(Adder.bind(2), Multiplier.bind(3))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the Serve HTTP address (the ingress)")
    args = parser.parse_args()

    handle = serve.run(app, name="composition", route_prefix="/compose")
    through_handle = handle.compute.remote(5).result()
    # A response passed into another call: the driver chains two deployments without waiting in between.
    adder = serve.get_deployment_handle("Adder", app_name="composition")
    multiplier = serve.get_deployment_handle("Multiplier", app_name="composition")
    chained = multiplier.multiply.remote(adder.add.remote(10)).result()
    request = urllib.request.Request(f"{args.url}/compose", data=b"7", headers={"Content-Type": "application/json"})
    over_http = json.loads(urllib.request.urlopen(request).read())
    print(json.dumps({"handle": through_handle, "chained": chained, "http": over_http}))


if __name__ == "__main__":
    main()
