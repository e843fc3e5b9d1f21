"""Ray Serve's hello world, unchanged for torus: a function deployment answering HTTP through the ingress.

    torus start --head                                   # or any torus cluster (ray.init() finds it)
    PYTHONPATH=python/as_ray:python:build/python .venv/bin/python examples/serve/ray_serve_hello.py

Under torus the application becomes one service; its replica is a process the head supervises, and the head's
ingress (port 8000 by default) routes "/" to it. The last line printed is JSON of what it got back.
"""

import argparse
import json
import urllib.request

from ray import serve


@serve.deployment
def hello(request) -> str:
    name = request.query_params.get("name", "world")
    return f"Hello {name}!"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the Serve HTTP address (the ingress)")
    args = parser.parse_args()

    serve.run(hello.bind())
    over_http = urllib.request.urlopen(f"{args.url}/?name=serve").read().decode()
    print(over_http)
    print(json.dumps({"http": over_http}))


if __name__ == "__main__":
    main()
