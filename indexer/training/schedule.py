"""The recipe's numbers every training run shares: AdamW's weight decay, the gradient-norm
clip, and the learning-rate schedule (linear warm-up, then linear decay to 0 at the run's
horizon). Pure functions, no torch: receipts and settings read them without loading a model."""

from __future__ import annotations

from dataclasses import dataclass

WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0


def warmup_then_decay(step: int, warmup: int, total: int) -> float:
    """lr multiplier at optimizer step `step` (0-based): linear from 1/warmup to 1 over
    `warmup` steps, then linear to 0 at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


@dataclass(frozen=True)
class Schedule:
    """Warm-up and decay over a horizon of `total` optimizer steps."""

    warmup: int
    total: int

    def multiplier(self, step: int) -> float:
        return warmup_then_decay(step, self.warmup, self.total)

    def describe(self) -> str:
        return (
            f"linear warm-up over {self.warmup} steps, then linear decay to 0 at step {self.total}"
        )


def plan_schedule(steps_per_epoch: int, epochs: int, ratio: float) -> Schedule:
    """The schedule for `epochs` epochs of `steps_per_epoch` steps, warm-up `ratio` of them.

    With `--epochs auto`, `epochs` is `--max-epochs`: the horizon is the longest the run may
    last, so stopping early leaves the rate part-way down its slope (as transformers' Trainer
    with early stopping does).
    """
    total = steps_per_epoch * epochs
    return Schedule(int(ratio * total), total)
