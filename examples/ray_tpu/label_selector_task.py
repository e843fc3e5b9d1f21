"""Tasks pinned to one TPU slice by its name, with a label selector on ray.io/tpu-slice-name.

    python label_selector_task.py --address auto

Every node of a TPU slice carries the label ray.io/tpu-slice-name (ray.nodes() shows it); a task with
`label_selector={"ray.io/tpu-slice-name": name}` runs only on that slice's hosts, and
`{"ray.io/tpu-worker-id": "0"}` beside it picks the slice's worker 0. The last line is a JSON summary.
"""

import argparse
import json
import os

import ray


@ray.remote(num_cpus=1)
def where():
    return {"node": ray.get_runtime_context().get_node_id(), "tpu_name": os.environ.get("TPU_NAME"),
            "tpu_worker_id": os.environ.get("TPU_WORKER_ID")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default=None)
    args = parser.parse_args()
    ray.init(address=args.address)
    slices = sorted({n["Labels"]["ray.io/tpu-slice-name"] for n in ray.nodes()
                     if n["Alive"] and "ray.io/tpu-slice-name" in n.get("Labels", {})})
    if not slices:
        raise SystemExit("no TPU slice in this cluster (no node has the label ray.io/tpu-slice-name)")
    name = slices[-1]
    hosts = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and
                   n.get("Labels", {}).get("ray.io/tpu-slice-name") == name)
    anywhere = ray.get([where.options(label_selector={"ray.io/tpu-slice-name": name}).remote() for _ in range(8)])
    worker0 = ray.get(where.options(label_selector={"ray.io/tpu-slice-name": name,
                                                    "ray.io/tpu-worker-id": "0"}).remote())
    print(json.dumps({"slice": name, "slices": slices, "hosts": hosts, "tasks": anywhere, "worker0": worker0}))


if __name__ == "__main__":
    main()
