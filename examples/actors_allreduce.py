"""16 actors, each holding one TPU chip, join torch.distributed and all-reduce a tensor.

Run it on a cluster with 16 TPU chips (the demo's `torus up examples/clusters/local.yaml`, or a v6e 4x4 slice):

    /usr/bin/python3 examples/actors_allreduce.py

Each actor holds {"TPU": 1}: its worker starts with TPU_VISIBLE_CHIPS naming its own chip (and the bounds variables
that make libtpu use only that chip). The chips here are simulated, so the collective runs on the CPU with gloo; on
real TPUs the same program uses XLA's collectives:

    # import torch_xla.distributed.xla_backend
    # dist.init_process_group("xla", init_method="xla://")     # torch_xla ("tpu"/"tpu_dist" in other stacks)
"""

import json
import os
import socket

import torus

WORLD = 16


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
    members = [Member.remote(rank) for rank in range(WORLD)]
    port = torus.get(members[0].free_port.remote())
    results = torus.get([m.all_reduce.remote(port) for m in members], timeout=240)
    for rank, (total, node, chips) in enumerate(results):
        print(f"rank {rank:2d}: node {node} chip {chips}: all_reduce sum = {total}")
    print(json.dumps({"sums": [r[0] for r in results], "placements": [[r[1], r[2]] for r in results]}))


if __name__ == "__main__":
    main()
