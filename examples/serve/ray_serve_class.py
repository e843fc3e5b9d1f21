"""A class deployment with __call__, as in Ray Serve's getting-started guide: two replicas, a constructor
argument, user_config applied through reconfigure(), and a method called through a DeploymentHandle.

    PYTHONPATH=python/as_ray:python:build/python .venv/bin/python examples/serve/ray_serve_class.py

Every answer names the process that gave it, so the replies show both replicas at work. The last line printed is
JSON of what it got back.
"""

import argparse
import json
import os
import urllib.request

from ray import serve


@serve.deployment(num_replicas=2, user_config={"threshold": 0.5}, health_check_period_s=1)
class Classifier:
    def __init__(self, label: str):
        self.label = label
        self.threshold = None

    def reconfigure(self, config: dict):
        self.threshold = config["threshold"]

    async def __call__(self, request):
        score = float(request.query_params["score"])
        return {"label": self.label if score >= self.threshold else "other", "score": score, "pid": os.getpid()}

    def describe(self) -> dict:
        return {"label": self.label, "threshold": self.threshold, "pid": os.getpid()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the Serve HTTP address (the ingress)")
    args = parser.parse_args()

    handle = serve.run(Classifier.bind("cat"), name="classifier", route_prefix="/classify")
    answers = [json.loads(urllib.request.urlopen(f"{args.url}/classify?score={s}").read()) for s in (0.9, 0.1)]
    described = [handle.describe.remote().result() for _ in range(20)]
    pids = sorted({d["pid"] for d in described} | {a["pid"] for a in answers})
    status = serve.status().applications["classifier"]
    print(json.dumps({"answers": [{k: a[k] for k in ("label", "score")} for a in answers],
                      "described": {k: described[0][k] for k in ("label", "threshold")},
                      "pids": pids, "status": status.status.value,
                      "replicas": {s.value: n for s, n in status.deployments["Classifier"].replica_states.items()}}))


if __name__ == "__main__":
    main()
