"""Checkpoints ordered by DISPATCH_EPOCH, so a stale execution's save never wins."""

from dispatch_checkpoints.execution import Execution, MissingIdentity
from dispatch_checkpoints.filesystem import Checkpoint, FilesystemStore, RepeatedEpoch
from dispatch_checkpoints.ordering import NotStarted, OutOfOrder, SaveKey, StaleExecution

__all__ = [
    "Checkpoint",
    "Execution",
    "FilesystemStore",
    "MissingIdentity",
    "NotStarted",
    "OutOfOrder",
    "RepeatedEpoch",
    "SaveKey",
    "StaleExecution",
]
