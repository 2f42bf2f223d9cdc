"""The optimiser step and the epoch of steps, written once.

`Trainer` owns AdamW (weight decay `WEIGHT_DECAY`), the schedule's `LambdaLR`, the gradient
clip (`GRAD_CLIP`, the recipe's 1.0) and bf16 autocast where the run's dtype is bf16 (weights,
optimiser state and losses stay fp32). `run_epoch` feeds it one epoch of batches with a
progress bar and an optional per-step hook (a checkpoint that is due, a horizon reached);
`save_atomic` writes a checkpoint so that a kill leaves the old one or the new one, never half.
The order of calls (backward, clip, step, schedule, zero_grad) is the one every run here was
measured with: a run resumed from a checkpoint ends bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import torch

from indexer.core.fsio import fsync_file
from indexer.core.progress import Mode, Progress
from indexer.errors import ModelError
from indexer.training.schedule import GRAD_CLIP, WEIGHT_DECAY, Schedule


def autocast(dtype: str) -> contextlib.AbstractContextManager:
    """The context a training forward runs in: bf16 autocast on the CPU for "bf16", else a
    no-op (fp32)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")


class Trainer:
    """AdamW with a warm-up-then-decay schedule over `params`, one `step(loss)` at a time.

    Args:
        params: the parameters to train (those that require grad).
        lr: the peak learning rate.
        schedule: warm-up and horizon in optimiser steps.
        dtype: "bf16" runs forwards under `autocast()` in bf16; "fp32" leaves them as they are.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        schedule: Schedule,
        dtype: Literal["fp32", "bf16"] = "fp32",
    ):
        self.params = list(params)
        self.schedule = schedule
        self.dtype = dtype
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=WEIGHT_DECAY)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule.multiplier)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context this run's training forwards run in (`autocast`)."""
        return autocast(self.dtype)

    def step(self, loss: torch.Tensor, where: str) -> float:
        """Backward, clip, one optimiser and schedule step; the loss as a float.

        Args:
            loss: the batch's scalar loss, graph attached.
            where: names the step in the error (e.g. "epoch 3", "adapt step 120").
        Raises:
            ModelError: the loss is not finite (the usual cause: a learning rate too high).
        """
        if not torch.isfinite(loss):
            raise ModelError(f"{where}: the loss became {loss.item()}; lower --lr")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, GRAD_CLIP)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()

    @property
    def lr(self) -> float:
        """The learning rate the next step will use."""
        return float(self.scheduler.get_last_lr()[0])

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


@dataclass
class EpochLoss:
    """What one epoch's steps add up to: the example-weighted loss and the time spent."""

    loss_sum: float = 0.0
    seen: int = 0
    seconds: float = 0.0

    @property
    def mean(self) -> float:
        return self.loss_sum / max(1, self.seen)


BatchT = TypeVar("BatchT")


def run_epoch(
    trainer: Trainer,
    batches: Sequence[BatchT],
    step_loss: Callable[[BatchT], torch.Tensor],
    label: str,
    mode: Mode,
    where: str,
    after_step: Callable[[BatchT, float], bool] | None = None,
) -> EpochLoss:
    """Train on `batches` in order, one optimiser step each, under a progress bar.

    Args:
        batches: the epoch's batches (whatever `step_loss` and `after_step` take; an index
            array of examples counts `len(index)` examples, anything else one).
        step_loss: a batch's scalar loss (the caller runs its forward in `trainer.autocast()`).
        label: the progress bar's name ("epoch 2/3").
        where: names the step in a non-finite loss error.
        after_step: called with the batch and its loss after each step; True stops the epoch
            there (a horizon reached).
    """
    totals = EpochLoss()
    bar = Progress(len(batches), label, "batch", mode, every_s=60.0, leave=True)
    started = time.perf_counter()
    for batch in batches:
        value = trainer.step(step_loss(batch), where)
        count = len(batch) if hasattr(batch, "__len__") else 1
        totals.loss_sum += value * count
        totals.seen += count
        bar.set_postfix(f"loss {totals.mean:.4f}")
        bar.update()
        if after_step is not None and after_step(batch, value):
            break
    bar.close()
    totals.seconds = time.perf_counter() - started
    return totals


def save_atomic(state: dict, path: Path) -> None:
    """`torch.save` to a temporary file beside `path`, fsync, then rename over it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(state, tmp)
    fsync_file(tmp)
    os.replace(tmp, path)
