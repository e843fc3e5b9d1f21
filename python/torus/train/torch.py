"""TorchTrainer and the helpers a PyTorch training function uses (Ray Train's names).

    def train_loop(config):
        model = torus.train.torch.prepare_model(build_model())     # on this worker's device, in DDP
        for epoch in range(config["epochs"]):
            ...
            torus.train.report({"epoch": epoch, "loss": loss}, checkpoint=...)

    TorchTrainer(train_loop, train_loop_config={"epochs": 3},
                 scaling_config=ScalingConfig(num_workers=4)).fit()
"""

import os

from torus.train._trainer import DataParallelTrainer


class TorchConfig:
    """`backend`: torch.distributed's backend (default: "tpu_dist" with `use_tpu`, "nccl" with `use_gpu`, else
    "gloo", as Ray Train V2 picks); `init_method`: "env" (MASTER_ADDR/MASTER_PORT; the only one torus gives);
    `timeout_s`: the collectives' timeout. A backend this torch build lacks fails the run naming it: "tpu_dist" needs
    torch_tpu on the workers; nothing falls back to the CPU unless the script asks for "gloo"."""

    def __init__(self, backend=None, init_method="env", timeout_s=1800):
        if init_method not in ("env", "tcp"):
            raise ValueError(f"The provided init_method ({init_method}) is not supported. Must be either 'env' or "
                             "'tcp'.")
        self.backend = backend
        self.init_method = init_method
        self.timeout_s = timeout_s


class TorchTrainer(DataParallelTrainer):
    """Each worker joins torch.distributed (init_method env://: MASTER_ADDR/MASTER_PORT of rank 0, RANK,
    WORLD_SIZE, LOCAL_RANK from the placement) before the function runs, and leaves it after. On TPU slices each
    worker also has TORCH_TPU_TOPOLOGY and TORCH_TPU_SLICEBUILDER_ADDRESSES of its slice."""

    _kind = "torch"

    def __init__(self, train_loop_per_worker, *, train_loop_config=None, torch_config=None, scaling_config=None,
                 run_config=None, datasets=None, dataset_config=None, validation_config=None, metadata=None,
                 resume_from_checkpoint=None):
        if torch_config is not None and not isinstance(torch_config, TorchConfig):
            raise ValueError(f"Invalid `TorchConfig` type: {torch_config.__class__}. Use "
                             "`ray.train.torch.TorchConfig`.")
        torch_config = torch_config or TorchConfig()
        if not torch_config.backend:
            if scaling_config is not None and scaling_config.use_tpu:
                torch_config.backend = "tpu_dist"
            else:
                torch_config.backend = "nccl" if scaling_config is not None and scaling_config.use_gpu else "gloo"
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, backend_config=torch_config,
                         scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                         dataset_config=dataset_config, validation_config=validation_config, metadata=metadata,
                         resume_from_checkpoint=resume_from_checkpoint)

    def _setup(self):
        return self._kind, {"backend": self._backend_config.backend, "timeout_s": self._backend_config.timeout_s}


def _on_tpu():
    # A worker of a TPU run (or one that holds TPU chips) is on a TPU host.
    return bool(os.environ.get("TORUS_SLICE_ID") or os.environ.get("TPU_VISIBLE_CHIPS"))


def get_device():
    """This worker's device: its GPU (CUDA_VISIBLE_DEVICES names the ones it holds); on a TPU worker the torch_tpu
    device — without torch_tpu, the CPU when the script chose the gloo backend, else RuntimeError as Ray's; else the
    CPU."""
    import torch
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        # A worker holding its own GPUs sees them from index 0; a worker sharing a host's GPUs takes its local rank's.
        return torch.device("cuda", local % torch.cuda.device_count() if "CUDA_VISIBLE_DEVICES" not in os.environ
                            else 0)
    if _on_tpu():
        try:
            import torch_tpu  # noqa: F401
        except ImportError:
            # The script asked for the CPU backend (TorchConfig(backend="gloo")): its tensors live on the CPU.
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
                return torch.device("cpu")
            raise RuntimeError("Using TPUTorchDeviceManager but torch_tpu is not available.") from None
        return torch.device("tpu")
    return torch.device("cpu")


def prepare_model(model, move_to_device=True, parallel_strategy="ddp", parallel_strategy_kwargs=None):
    """Moves `model` to this worker's device and, in a run of more than one worker, wraps it in
    DistributedDataParallel (`parallel_strategy="ddp"`; None leaves it unwrapped)."""
    import torch
    import torch.distributed as dist
    if parallel_strategy not in ("ddp", None):
        raise ValueError(f"parallel_strategy: 'ddp' or None, got {parallel_strategy!r}")
    device = get_device()
    if move_to_device:
        model = model.to(device)
    if parallel_strategy == "ddp" and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        kwargs = dict(parallel_strategy_kwargs or {})
        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device.index])
        model = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    return model


class _DeviceLoader:
    def __init__(self, loader, device):
        self._loader = loader
        self._device = device

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        for batch in self._loader:
            yield _to_device(batch, self._device)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _to_device(batch, device):
    import torch
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def prepare_data_loader(data_loader, add_dist_sampler=True, move_to_device=True):
    """In a run of more than one worker, gives each worker its share of the data (a DistributedSampler, shuffling
    when the loader shuffled); with `move_to_device`, batches come on this worker's device."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
    loader = data_loader
    if (add_dist_sampler and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
            and not isinstance(loader.sampler, DistributedSampler)):
        if loader.batch_size is None:
            raise ValueError("prepare_data_loader: a loader with a custom batch_sampler cannot be split across "
                             "workers; give it a DistributedSampler yourself, or add_dist_sampler=False")
        sampler = DistributedSampler(loader.dataset, shuffle=isinstance(loader.sampler, RandomSampler))
        extra = {}
        if loader.num_workers > 0:
            extra = {"persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor}
        loader = DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler,
                            num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                            pin_memory=loader.pin_memory, drop_last=loader.drop_last, timeout=loader.timeout,
                            worker_init_fn=loader.worker_init_fn, generator=loader.generator, **extra)
    device = get_device()
    if move_to_device and device.type != "cpu":
        return _DeviceLoader(loader, device)
    return loader
