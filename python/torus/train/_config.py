"""ScalingConfig, RunConfig, FailureConfig and CheckpointConfig (Ray Train's names), and the run spec they make."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class ScalingConfig:
    """How many workers, on what.

    TPU: `use_tpu=True` with `accelerator_type` ("TPU-V6E", or "v6e") and `topology` ("4x4") reserves whole slices
    (`num_slices`, default 1); one worker per host unless `resources_per_worker` asks for fewer chips ({"TPU": 1}
    gives one per chip). `num_workers` is derived from the shape when left out, and must match it when given.
    Otherwise `num_workers` workers of `resources_per_worker` (default {"CPU": 1}, plus {"GPU": 1} with `use_gpu`),
    placed by `placement_strategy` (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD). `label_selector` applies to every
    worker's host. `fallbacks`: other TPU shapes tried in order, as dicts {"accelerator_type", "topology",
    "num_slices"}."""

    num_workers: Optional[int] = None
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    placement_strategy: str = "PACK"
    use_tpu: bool = False
    topology: Optional[str] = None
    accelerator_type: Optional[str] = None
    num_slices: int = 1
    chips_per_host: Optional[int] = None
    label_selector: Optional[Dict[str, str]] = None
    fallbacks: List[dict] = field(default_factory=list)

    def _spec(self):
        accel = self.accelerator_type
        if accel and self.use_tpu and not accel.upper().startswith("TPU-"):
            accel = "TPU-" + accel
        spec = {"use_tpu": bool(self.use_tpu), "use_gpu": bool(self.use_gpu),
                "placement_strategy": self.placement_strategy, "num_slices": self.num_slices,
                "label_selector": dict(self.label_selector or {}), "fallbacks": list(self.fallbacks)}
        if self.num_workers is not None:
            spec["num_workers"] = self.num_workers
        if accel:
            spec["accelerator_type"] = accel.upper() if self.use_tpu else accel
        if self.topology:
            spec["topology"] = self.topology
        if self.chips_per_host is not None:
            spec["chips_per_host"] = self.chips_per_host
        if self.resources_per_worker is not None:
            spec["resources_per_worker"] = dict(self.resources_per_worker)
        if self.use_tpu:
            # The ranks of a TPU run follow the slice's hosts; the strategy is the slice's.
            spec.pop("placement_strategy")
        return spec

    def _cpus_per_worker(self):
        return (self.resources_per_worker or {}).get("CPU", 1)


@dataclass
class FailureConfig:
    """`max_failures`: failed attempts that are restarted (every worker again, from the latest checkpoint); 0 none,
    -1 without limit."""

    max_failures: int = 0


@dataclass
class CheckpointConfig:
    """`num_to_keep`: the newest committed checkpoints kept (default all)."""

    num_to_keep: Optional[int] = None


@dataclass
class RunConfig:
    """`name`: the run's name (1-64 of a-z 0-9 - _ . ; default `<trainer>-<date>-<time>`); a run given the name and
    storage path of an earlier one resumes from its newest checkpoint. `storage_path`: an absolute directory that the
    head and every host see (default /tmp/torus/runs); the run's files go to `<storage_path>/<name>/`."""

    name: Optional[str] = None
    storage_path: Optional[str] = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None

    def _spec(self, default_name):
        spec = {"name": self.name or default_name,
                "max_failures": (self.failure_config or FailureConfig()).max_failures}
        if self.storage_path:
            spec["storage_path"] = self.storage_path
        keep = (self.checkpoint_config or CheckpointConfig()).num_to_keep
        if keep is not None:
            spec["checkpoints_to_keep"] = keep
        return spec
