"""Checkpoint: a directory of files that a run commits (Ray Train's name)."""

import contextlib
import os
import shutil
import tempfile


class Checkpoint:
    """A checkpoint directory. Workers make one from a directory they wrote (`Checkpoint.from_directory(d)`) and pass
    it to `torus.train.report`; a restarted worker gets the newest committed one from `torus.train.get_checkpoint()`,
    and `fit()` returns it in `Result.checkpoint`."""

    def __init__(self, path):
        self.path = os.fspath(path)

    @classmethod
    def from_directory(cls, path):
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise ValueError(f"Checkpoint.from_directory: {path!r} is not a directory")
        return cls(os.path.abspath(path))

    @contextlib.contextmanager
    def as_directory(self):
        """The checkpoint's directory, to read (do not change it)."""
        yield self.path

    def to_directory(self, path=None):
        """Copies the checkpoint's files to `path` (default: a new temporary directory); returns it."""
        path = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="torus-checkpoint-")
        shutil.copytree(self.path, path, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".torus_committed"))
        return path

    def __eq__(self, other):
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self):
        return hash(self.path)

    def __repr__(self):
        return f"Checkpoint(path={self.path!r})"
