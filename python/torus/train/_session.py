"""What a training function calls inside its worker: report, get_checkpoint, get_context (Ray Train's names).

They wrap the run's helper `torus_train` (python/torus_train.py), so a function that uses them behaves the same in
a run started by a trainer, in a run started by `torus train`, and standalone (rank 0 of 1, reports printed)."""

import torus_train

from torus.train._checkpoint import Checkpoint


class TrainContext:
    """Where this worker stands in its run: ranks and sizes as torch.distributed counts them, the run and attempt."""

    def __init__(self, ctx):
        self._ctx = ctx

    def get_world_size(self):
        return self._ctx.world_size

    def get_world_rank(self):
        return self._ctx.rank

    def get_local_rank(self):
        return self._ctx.local_rank

    def get_local_world_size(self):
        return self._ctx.local_world_size

    def get_node_rank(self):
        return self._ctx.node_rank

    def get_experiment_name(self):
        """The run's name."""
        return self._ctx.run_name

    def get_run_id(self):
        return self._ctx.run_id

    def get_attempt(self):
        """1 for the first attempt, one more after each restart."""
        return self._ctx.attempt

    def get_slice_id(self):
        """The index of this worker's TPU slice in a multislice run (0 … num_slices-1); None off TPUs."""
        return self._ctx.slice_id

    def get_storage_path(self):
        """`<storage_path>/<name>`: where the run's checkpoints are committed."""
        return self._ctx.storage_path

    def __repr__(self):
        c = self._ctx
        return f"TrainContext(run={c.run_name!r}, attempt={c.attempt}, rank={c.rank}/{c.world_size})"


def get_context():
    return TrainContext(torus_train.get_context())


def report(metrics, checkpoint=None):
    """Reports this worker's `metrics` (a JSON-serialisable dict) for one step, with an optional Checkpoint.

    Every worker reports every step (`metrics["step"]`, else one past its previous report); a step's checkpoint is
    committed once every worker has reported that step. The checkpoint's files are copied before this returns, so
    the directory may be removed afterwards. Rank 0's metrics are the run's (`Result.metrics`)."""
    if not isinstance(metrics, dict):
        raise TypeError(f"report: metrics must be a dict, got {type(metrics).__name__}")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"report: checkpoint must be a torus.train.Checkpoint, got {type(checkpoint).__name__}")
    torus_train.report(metrics, checkpoint_dir=checkpoint.path if checkpoint is not None else None)


def get_checkpoint():
    """The newest checkpoint the run committed (from an earlier attempt, or an earlier run of the same name and
    storage path), or None on a fresh start."""
    path = torus_train.get_checkpoint()
    return Checkpoint(path) if path else None
