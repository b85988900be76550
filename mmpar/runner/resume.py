"""Where a training run starts: a checkpoint to resume, or scratch, said in words.

tools/train.py decides this before any work: a missing or corrupt checkpoint is an
error up front, a run that is already complete ends at once, and a fresh run
about to overwrite another run's checkpoints is warned about.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from mmpar.runner.checkpoint import LATEST, find_latest_checkpoint, load_checkpoint, model_weights

__all__ = [
    "ResumeMismatch",
    "ResumePlan",
    "existing_checkpoints",
    "plan_resume",
    "resume_world_size",
]


class ResumeMismatch(ValueError):
    """A checkpoint that this run cannot continue exactly; the message says what differs."""


def resume_world_size(
    meta: Dict[str, Any],
    world_size: int,
    iters_per_epoch: int,
    accumulated: bool,
) -> Optional[Tuple[int, str]]:
    """Continue a checkpoint written by another number of processes, or refuse.

    Checkpoints are written at the end of an epoch, so the next epoch can start
    with any number of processes: its sampler deals every sample once over the new
    ranks, each step takes ``world_size x samples_per_gpu`` images, and
    ``--auto-scale-lr`` scales the learning rate by that new batch. What counted
    iterations does so from the epoch: ``iter = epoch x iters_per_epoch`` of this
    run. An open accumulation window (``accumulated_grads`` in the checkpoint)
    cannot be carried over: its gradients are the mean over the old ranks' batches.

    Args:
        meta: The checkpoint's ``meta`` (``epoch``, ``iter``, ``world_size``).
        world_size: The processes of this run.
        iters_per_epoch: Iterations per epoch of this run.
        accumulated: The checkpoint holds an open window's gradients.

    Returns:
        None when the checkpoint was written by as many processes (or does not say);
        else ``(iter, message)``: the iteration to continue from and a line for the log.

    Raises:
        ResumeMismatch: An open accumulation window and another number of processes.
    """
    saved = meta.get("world_size")
    if not isinstance(saved, int) or saved == world_size:
        return None
    epoch = int(meta["epoch"])
    if accumulated:
        raise ResumeMismatch(
            f"the checkpoint of epoch {epoch} was written by {saved} process(es) inside an "
            f"accumulation window (optimizer_config.cumulative_iters), this run has "
            f"{world_size}: the window's gradients cannot be dealt over other ranks; resume with "
            f"{saved} process(es), or from a checkpoint outside a window"
        )
    new_iter = epoch * iters_per_epoch
    message = (
        f"resumed a checkpoint of {saved} process(es) with {world_size}: epoch {epoch + 1} "
        f"deals every sample once over {world_size} rank(s), {iters_per_epoch} iterations "
        f"per epoch, each step takes {world_size} x samples_per_gpu images; iter "
        f"{int(meta['iter'])} -> {new_iter}"
    )
    return new_iter, message


@dataclasses.dataclass
class ResumePlan:
    """What a run resumes from, and what to tell the user about it.

    Attributes:
        checkpoint: The checkpoint to resume from, or None to start from scratch.
        meta: That checkpoint's ``meta`` (epoch, iter, seed...), or None.
        message: One line for the log, or "" when there is nothing to say.
        complete: The checkpoint already holds ``max_epochs`` epochs: nothing to train.
        weights: A bare ``state_dict`` given to resume from: there is nothing to resume
            (no epoch, optimizer or random states), so the run starts from these
            weights, as with ``load_from``.
    """

    checkpoint: Optional[str] = None
    meta: Optional[Dict[str, Any]] = None
    message: str = ""
    complete: bool = False
    weights: Optional[str] = None


def plan_resume(
    resume_from: Optional[str], auto_resume: bool, work_dir: Path, max_epochs: int
) -> ResumePlan:
    """Decide where a run starts, reading the checkpoint (once) to check it.

    Args:
        resume_from: ``--resume-from`` or the config's ``resume_from``; wins over
            ``auto_resume``.
        auto_resume: Resume from the newest checkpoint of ``work_dir``, if any.
        work_dir: The run's work dir.
        max_epochs: Epochs the run trains in all (``runner.max_epochs``).

    Returns:
        The plan.

    Raises:
        FileNotFoundError: ``resume_from`` does not exist.
        ValueError: the checkpoint is corrupt or holds no weights, or it has a
            ``state_dict`` but its ``meta`` has no int ``epoch``.
    """
    how = "resume_from"
    if not resume_from and auto_resume:
        latest = find_latest_checkpoint(work_dir)
        if latest is None:
            return ResumePlan(
                message=f"auto-resume: no checkpoint in {work_dir}; starting from scratch"
            )
        resume_from, how = str(latest), "auto-resume"
    if not resume_from:
        return ResumePlan()
    checkpoint = load_checkpoint(resume_from)
    _, kind = model_weights(checkpoint, resume_from)
    if "state_dict" not in checkpoint:
        return ResumePlan(
            weights=resume_from,
            message=f"{how}: {resume_from} is {kind}, with no epoch, optimizer or random "
            "states to resume: training starts at epoch 1 from its weights, as with load_from",
        )
    meta = checkpoint.get("meta") or {}
    epoch = meta.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise ValueError(
            f"checkpoint {resume_from!r}: its meta has no epoch to resume from "
            f"(meta keys: {sorted(meta)})"
        )
    if epoch >= max_epochs:
        return ResumePlan(
            resume_from,
            meta,
            f"{how}: {resume_from} is at epoch {epoch} of runner.max_epochs={max_epochs}: the run "
            "is already complete, nothing to train (raise runner.max_epochs to train further)",
            complete=True,
        )
    return ResumePlan(
        resume_from,
        meta,
        f"{how}: resuming from {resume_from} (epoch {epoch} of {max_epochs} done)",
    )


def existing_checkpoints(work_dir: Path) -> List[str]:
    """Names of the checkpoints (``epoch_*.pth``, ``latest.pth``) already in ``work_dir``."""
    if not work_dir.is_dir():
        return []
    names = [p.name for p in work_dir.glob("epoch_*.pth")]
    if (work_dir / LATEST).exists() or (work_dir / LATEST).is_symlink():
        names.append(LATEST)
    return sorted(names)
