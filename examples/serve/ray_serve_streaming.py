"""Streaming, as in Ray Serve's guide: an HTTP route returning a StreamingResponse whose chunks reach the client as
they are produced, and a generator method read through a streaming DeploymentHandle.

    PYTHONPATH=python/as_ray:python:build/python .venv/bin/python examples/serve/ray_serve_streaming.py

The last line printed is JSON of the chunks and items, with when each arrived.
"""

import argparse
import asyncio
import http.client
import json
import time
import urllib.parse

from starlette.responses import StreamingResponse

from ray import serve


@serve.deployment
class Counter:
    async def __call__(self, request) -> StreamingResponse:
        n = int(request.query_params.get("n", "5"))

        async def numbers():
            for i in range(n):
                yield f"{i}\n"
                await asyncio.sleep(0.3)

        return StreamingResponse(numbers(), media_type="text/plain")

    def count(self, n: int):
        for i in range(n):
            time.sleep(0.1)
            yield i


def read_chunks(url):
    """The body's chunks as they arrive: [(seconds since the request, text)]."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    start = time.monotonic()
    conn.request("GET", f"{parts.path}?{parts.query}")
    response = conn.getresponse()
    chunks = []
    while True:
        chunk = response.read1(65536)
        if not chunk:
            break
        chunks.append((round(time.monotonic() - start, 2), chunk.decode()))
    conn.close()
    return chunks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the Serve HTTP address (the ingress)")
    args = parser.parse_args()

    handle = serve.run(Counter.bind(), name="streaming", route_prefix="/stream")
    chunks = read_chunks(f"{args.url}/stream?n=4")
    items = list(handle.options(stream=True).count.remote(5))
    print(json.dumps({"chunks": chunks, "items": items}))


if __name__ == "__main__":
    main()
