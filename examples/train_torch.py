"""Data-parallel PyTorch training as a torus gang run.

Trains a small MLP regression with DistributedDataParallel on CPU (gloo; nccl where CUDA is available). Every batch is
generated from --seed, the step number and the rank, and the model and optimizer are checkpointed with the step, so
a run that is interrupted and resumed from a committed checkpoint ends with exactly the same final loss as a run
that was never interrupted.

Under torus the head sets the environment (RANK, WORLD_SIZE, MASTER_ADDR, TORUS_*). Without it the script trains
as a single process, so `python3 examples/train_torch.py --steps 20` works anywhere torch is installed.

Output (rank 0 unless noted): `world_size check: all_reduce=<n> WORLD_SIZE=<n>` (every rank),
`resumed from step <s>` (every rank, when resuming), `step <s> loss <x>` every --log-every steps, and
`final loss: <x>` (mean squared error on a fixed evaluation set, six decimals).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from typing import Optional, Tuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:
    import torus_train
except ImportError:  # Running from a checkout without PYTHONPATH set.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
    import torus_train

INPUT_DIM = 8
HIDDEN_DIM = 32
EVAL_SIZE = 256
CHECKPOINT_FILE = "model.pt"


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="total training steps (default 60)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="checkpoint every N steps (default 10)")
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default 32)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model and the data (default 0)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step (default 0)")
    parser.add_argument("--log-every", type=int, default=5, help="print the loss every N steps (default 5)")
    parser.add_argument("--fail-at-step", type=int, default=None, help="exit 1 just before this step")
    parser.add_argument("--fail-rank", type=int, default=0, help="rank that fails (default 0)")
    parser.add_argument("--fail-attempt", type=int, default=1, help="attempt that fails (default 1)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 1 or args.batch_size < 1 or args.log_every < 1:
        parser.error("--steps, --checkpoint-every, --batch-size and --log-every must be positive")
    return args


def make_deterministic() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_distributed() -> Tuple[int, int]:
    """Joins the process group from the env (a single-process group outside a run); returns (rank, world size)."""
    if "RANK" not in os.environ and "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group(backend=torus_train.torch_backend(), init_method="env://")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ones = torch.ones(1)
    dist.all_reduce(ones)
    total = int(ones.item())
    print(f"world_size check: all_reduce={total} WORLD_SIZE={os.environ['WORLD_SIZE']}", flush=True)
    if total != int(os.environ["WORLD_SIZE"]):
        raise SystemExit(f"all_reduce over the group gave {total}, but WORLD_SIZE={os.environ['WORLD_SIZE']}")
    return rank, world_size


def generator(seed: int, stream: int, index: int) -> torch.Generator:
    """A generator for one (seed, stream, index) triple, independent of everything run before."""
    return torch.Generator().manual_seed(((seed * 1_000_003 + stream) * 1_000_033 + index) % (2**63))


def teacher(seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The fixed function the model learns: y = sin(x @ w) + 0.5 * (x @ v)."""
    g = generator(seed, 0, 0)
    scale = INPUT_DIM**-0.5
    return torch.randn(INPUT_DIM, 1, generator=g) * scale, torch.randn(INPUT_DIM, 1, generator=g) * scale


def batch(seed: int, stream: int, index: int, size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    w, v = teacher(seed)
    x = torch.randn(size, INPUT_DIM, generator=generator(seed, stream, index))
    return x, torch.sin(x @ w) + 0.5 * (x @ v)


def train_batch(seed: int, step: int, rank: int, world_size: int, size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """This rank's shard of the global batch of one step."""
    return batch(seed, 1, step * world_size + rank, size)


def eval_batch(seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    return batch(seed, 2, 0, EVAL_SIZE)


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(INPUT_DIM, HIDDEN_DIM), nn.Tanh(), nn.Linear(HIDDEN_DIM, 1))


def restore(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Loads the committed checkpoint, if any; returns the number of steps it had completed (0 on a fresh start)."""
    checkpoint_dir = torus_train.get_checkpoint()
    if checkpoint_dir is None:
        return 0
    state = torch.load(os.path.join(checkpoint_dir, CHECKPOINT_FILE), map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = int(state["step"])
    print(f"resumed from step {step}", flush=True)
    return step


def report(step: int, loss: float, model: nn.Module, optimizer: torch.optim.Optimizer, with_checkpoint: bool) -> None:
    metrics = {"step": step, "loss": loss}
    if not with_checkpoint:
        torus_train.report(metrics)
        return
    with tempfile.TemporaryDirectory(prefix="torus-ckpt-") as tmp:
        state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, os.path.join(tmp, CHECKPOINT_FILE))
        torus_train.report(metrics, checkpoint_dir=tmp)


def maybe_fail(args: argparse.Namespace, step: int, rank: int, attempt: int) -> None:
    if (step, rank, attempt) == (args.fail_at_step, args.fail_rank, args.fail_attempt):
        print(f"failing at step {step} on rank {rank}, attempt {attempt}, as requested", flush=True)
        os._exit(1)


def mean_over_ranks(value: torch.Tensor, world_size: int) -> float:
    total = value.detach().clone()
    dist.all_reduce(total)
    return total.item() / world_size


def train(args: argparse.Namespace) -> None:
    rank, world_size = init_distributed()
    attempt = torus_train.get_context().attempt
    model = build_model(args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = restore(model, optimizer)
    ddp = DistributedDataParallel(model)
    loss_fn = nn.MSELoss()

    for step in range(start + 1, args.steps + 1):
        maybe_fail(args, step, rank, attempt)
        x, y = train_batch(args.seed, step, rank, world_size, args.batch_size)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optimizer.step()
        global_loss = mean_over_ranks(loss, world_size)
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step {step} loss {global_loss:.6f}", flush=True)
        report(step, global_loss, model, optimizer, rank == 0 and step % args.checkpoint_every == 0)
        if args.sleep > 0:
            time.sleep(args.sleep)

    if rank == 0:
        with torch.no_grad():
            x, y = eval_batch(args.seed)
            print(f"final loss: {loss_fn(model(x), y).item():.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    args = parse_args()
    make_deterministic()
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
