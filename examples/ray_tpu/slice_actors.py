"""Actors on every host of a TPU slice, reserved whole with ray.util.tpu.slice_placement_group, joined in an
allreduce — the Ray-on-TPU guide's pattern for frameworks that start their own processes.

    python slice_actors.py --address auto        # on a cluster with a v6e 4x4 slice (4 hosts of 4 chips)

One actor per bundle (one bundle per host, holding its 4 chips) is placed with a PlacementGroupSchedulingStrategy;
the actors form a torch.distributed gloo group (rank 0's host as the rendezvous) and all-reduce their ranks. Each
reports its host's TPU_WORKER_ID and TPU_NAME. The last line is a JSON summary.
"""

import argparse
import json
import os
import socket

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from ray.util.tpu import slice_placement_group


@ray.remote(num_cpus=1, resources={"TPU": 4})
class HostWorker:
    def address(self):
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def allreduce(self, rank, world_size, master):
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://{master[0]}:{master[1]}", rank=rank,
                                world_size=world_size)
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        dist.destroy_process_group()
        return {"rank": rank, "sum": float(t[0]), "tpu_worker_id": os.environ.get("TPU_WORKER_ID"),
                "tpu_name": os.environ.get("TPU_NAME"), "node": ray.get_runtime_context().get_node_id()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default=None)
    parser.add_argument("--topology", default="4x4")
    parser.add_argument("--accelerator-version", default="v6e")
    args = parser.parse_args()
    ray.init(address=args.address)
    slice_pg = slice_placement_group(topology=args.topology, accelerator_version=args.accelerator_version)
    pg = slice_pg.placement_group
    ray.get(pg.ready(), timeout=120)
    workers = [HostWorker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)).remote() for i in range(slice_pg.num_bundles)]
    master = ray.get(workers[0].address.remote())
    results = ray.get([w.allreduce.remote(i, len(workers), master) for i, w in enumerate(workers)])
    slice_pg.shutdown()
    print(json.dumps({"num_bundles": slice_pg.num_bundles, "chips_per_host": slice_pg.chips_per_host,
                      "results": results}))


if __name__ == "__main__":
    main()
