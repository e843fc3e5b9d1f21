"""A Ray Train job as the Ray guides submit it: TorchTrainer on CPU workers, reports with checkpoints.

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- python torch_job.py
    torus job submit --working-dir . -- python torch_job.py

Two workers (`ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1})`) fit a linear model
with DistributedDataParallel over gloo; every epoch each reports its loss and rank 0 a checkpoint. A run started
again with the same name resumes from its newest checkpoint. The last line is a JSON summary.
"""

import argparse
import json
import os
import tempfile

import ray
import ray.train
import ray.train.torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_loop_per_worker(config):
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    generator = torch.Generator().manual_seed(1 + dist.get_rank())
    x = torch.randn(256, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"))
            model.module.load_state_dict(state["model"]) if hasattr(model, "module") else model.load_state_dict(
                state["model"])
            start = state["epoch"]
    for epoch in range(start + 1, config["epochs"] + 1):
        for _ in range(20):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        metrics = {"epoch": epoch, "loss": float(loss), "world_size": dist.get_world_size()}
        if ray.train.get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                inner = model.module if hasattr(model, "module") else model
                torch.save({"model": inner.state_dict(), "epoch": epoch}, os.path.join(d, "model.pt"))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--storage-path", default=None)
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    ray.init()
    trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"lr": 0.05, "epochs": args.epochs},
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False,
                                                        resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(name=args.name, storage_path=args.storage_path))
    result = trainer.fit()
    print(json.dumps({"metrics": result.metrics, "checkpoint": result.checkpoint.path if result.checkpoint else None}))


if __name__ == "__main__":
    main()
