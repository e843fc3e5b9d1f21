"""A slice placement group on a v6e 4x4, and 16 actors — one per chip, pinned to the slice's bundles — that join
torch.distributed and all-reduce a tensor.

Run it on a cluster with a v6e 4x4 slice (the demo's `torus up examples/clusters/local.yaml`, or a real one):

    /usr/bin/python3 examples/actors_allreduce.py

The slice is reserved whole and atomically (one bundle per host, in TPU worker id order); each actor holds
{"TPU": 1} inside its host's bundle: its worker starts with TPU_VISIBLE_CHIPS naming its own chip (and the bounds
variables that make libtpu use only that chip). The chips here are simulated, so the collective runs on the CPU with gloo; on
real TPUs the same program uses XLA's collectives:

    # import torch_xla.distributed.xla_backend
    # dist.init_process_group("xla", init_method="xla://")     # torch_xla ("tpu"/"tpu_dist" in other stacks)
"""

import json
import os
import socket

import torus
from torus.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from torus.util.tpu import slice_placement_group

WORLD = 16
CHIPS_PER_HOST = 4


@torus.remote(resources={"TPU": 1})
class Member:
    def __init__(self, rank):
        self.rank = rank

    def free_port(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def all_reduce(self, master_port):
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{master_port}", rank=self.rank,
                                world_size=WORLD)
        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        dist.destroy_process_group()
        ctx = torus.get_runtime_context()
        return t.item(), ctx.get_node_id(), os.environ["TPU_VISIBLE_CHIPS"]


def main():
    torus.init()
    tpu_slice = slice_placement_group(topology="4x4", accelerator_version="v6e")
    pg = tpu_slice.placement_group
    torus.get(pg.ready(), timeout=120)
    members = [
        Member.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=rank // CHIPS_PER_HOST)).remote(rank)
        for rank in range(WORLD)
    ]
    port = torus.get(members[0].free_port.remote())
    results = torus.get([m.all_reduce.remote(port) for m in members], timeout=240)
    for rank, (total, node, chips) in enumerate(results):
        print(f"rank {rank:2d}: node {node} chip {chips}: all_reduce sum = {total}")
    slice_hosts = sorted({b["node_id"] for b in pg.table()["bundles"]})
    print(json.dumps({"sums": [r[0] for r in results], "placements": [[r[1], r[2]] for r in results],
                      "slice_hosts": slice_hosts}))
    tpu_slice.shutdown()


if __name__ == "__main__":
    main()
