"""TorchTrainer on a v6e 4x4 slice: data-parallel training of a small classifier, one worker per host.

Run it on a cluster with a v6e 4x4 slice (the demo's `torus up examples/clusters/local.yaml`, or a real one):

    /usr/bin/python3 examples/train_torch_trainer.py [--epochs 4] [--fail-once]

`TorchTrainer(...).fit()` reserves the whole slice, starts one worker per host with its distributed environment
(RANK, MASTER_ADDR, TPU_WORKER_ID, ...) computed from the placement, joins them into torch.distributed, and runs
`train_loop_per_worker` on each. The data is generated from a fixed seed (no downloads); each worker trains on its
share (a DistributedSampler from prepare_data_loader), DistributedDataParallel keeps the replicas equal, and every
epoch every worker reports its metrics while rank 0 adds a checkpoint. With --fail-once, rank 1 fails in its first
attempt after epoch 2; the run restarts every worker from the newest committed checkpoint and ends with the same
model as an uninterrupted run.

The chips here are simulated, so the script asks for the CPU backend, gloo (`TorchConfig(backend="gloo")`). Without
it a TPU run's backend is "tpu_dist", as in Ray Train, and a worker without torch_tpu fails the run naming it: on
real TPUs with torch_tpu installed, drop the torch_config and `get_device()` gives the TPU device.
"""

import argparse
import json
import os
import tempfile

import torus
import torus.train
from torus.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from torus.train.torch import TorchConfig, TorchTrainer

SAMPLES = 512
FEATURES = 16
CLASSES = 4


def dataset():
    import torch
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(CLASSES, FEATURES, generator=g) * 2
    labels = torch.randint(0, CLASSES, (SAMPLES,), generator=g)
    points = centers[labels] + torch.randn(SAMPLES, FEATURES, generator=g)
    return torch.utils.data.TensorDataset(points, labels)


def train_loop_per_worker(config):
    import torch
    import torch.distributed as dist
    from torch import nn

    ctx = torus.train.get_context()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    start = 0
    checkpoint = torus.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
        print(f"rank {ctx.get_world_rank()}: resuming after epoch {start}")
    model = torus.train.torch.prepare_model(model)
    loader = torch.utils.data.DataLoader(dataset(), batch_size=32, shuffle=True)
    loader = torus.train.torch.prepare_data_loader(loader)

    for epoch in range(start + 1, config["epochs"] + 1):
        loader.sampler.set_epoch(epoch)
        total, correct, count = 0.0, 0, 0
        for x, y in loader:
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
        # The whole run's loss and accuracy, and whether every replica holds the same weights.
        sums = torch.tensor([total, correct, count], dtype=torch.float64)
        dist.all_reduce(sums)
        weights = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum().reshape(1)
        gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(ctx.get_world_size())]
        dist.all_gather(gathered, weights)
        metrics = {"epoch": epoch, "step": epoch, "loss": sums[0].item() / sums[2].item(),
                   "accuracy": sums[1].item() / sums[2].item(), "samples": int(sums[2].item()),
                   "replicas_equal": all(torch.equal(g, gathered[0]) for g in gathered),
                   "tpu_worker_id": os.environ.get("TPU_WORKER_ID"), "world_size": ctx.get_world_size(),
                   "attempt": ctx.get_attempt()}
        if ctx.get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch}, os.path.join(d, "state.pt"))
                torus.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            torus.train.report(metrics)
        if config["fail_once"] and epoch == 2 and ctx.get_world_rank() == 1 and ctx.get_attempt() == 1:
            raise RuntimeError("rank 1 fails once after epoch 2 (--fail-once)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--fail-once", action="store_true")
    parser.add_argument("--storage-path", default=None)
    args = parser.parse_args()
    torus.init()
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"lr": 0.1, "epochs": args.epochs, "fail_once": args.fail_once},
        scaling_config=ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4", num_workers=4),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(storage_path=args.storage_path, failure_config=FailureConfig(max_failures=2)),
    )
    result = trainer.fit()
    print(f"final metrics: {result.metrics}")
    print(f"checkpoint: {result.checkpoint}")
    print(json.dumps({"metrics": result.metrics, "history": result.metrics_history,
                      "checkpoint": result.checkpoint.path if result.checkpoint else None,
                      "attempts": result.attempts, "name": result.name}))


if __name__ == "__main__":
    main()
