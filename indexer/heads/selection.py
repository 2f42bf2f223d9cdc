"""Which epoch of a head's training is kept: the best validation score (with the plateau rule
for ties), the patience mark of `--epochs auto`, and the means of the weights tried after the
run stops. Knows no optimiser (`indexer.training`) and no data; `heads.train` drives it."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from indexer.core.progress import write_line

MIN_DELTA = 0.002  # auto epochs: a validation score must rise by this much to reset patience
LOSS_TIE_DELTA = 1e-3  # auto epochs: an equal score counts as progress with a 0.1 % lower loss


def better(score: float, loss: float, best_score: float, best_loss: float, ties: bool) -> bool:
    """Whether an epoch beats the best so far: a higher validation score; with `ties` (auto
    epochs) also the same score with a validation loss lower by more than LOSS_TIE_DELTA
    (relative), so a run on a plateau (every example in the majority class, the score flat
    while the model learns) is not stopped for patience."""
    if score > best_score:
        return True
    return ties and score == best_score and loss < best_loss * (1 - LOSS_TIE_DELTA)


def progressed(score: float, loss: float, mark_score: float, mark_loss: float) -> bool:
    """Whether an epoch resets `--patience` (auto epochs): a validation score at least
    MIN_DELTA above the last epoch that did, or the plateau rule of `better`. Rises smaller
    than MIN_DELTA still update the best state kept, but do not prolong the run: on a large
    set the curve creeps up by 0.1 points an epoch for many epochs, and each would otherwise
    buy `patience` more epochs of training for nothing a user would notice."""
    if score == mark_score:
        return better(score, loss, mark_score, mark_loss, ties=True)
    return score >= mark_score + MIN_DELTA


def weights_sum(total: dict | None, model) -> dict:
    """`total` plus the model's floating-point weights (fp32; a copy when `total` is None)."""
    state = model.state_dict()
    if total is None:
        return {k: v.detach().float().clone() for k, v in state.items() if v.is_floating_point()}
    for k, v in total.items():
        v.add_(state[k].detach().float())
    return total


@dataclass
class EpochSelection:
    """The state of the choice as epochs come in.

    Attributes:
        averaging: auto epochs of the main stage: keep running sums of the weights from the
            best epoch on (`tail`) and from epoch 2 on (`run`) for `keep_average`.
        keeps_state: copy the best epoch's weights (the main stage; the LP-FT probe does not).
        ties: the plateau rule of `better` applies (auto epochs).
    """

    averaging: bool
    keeps_state: bool
    ties: bool
    best_epoch: int = 0
    best_score: float = float("-inf")
    best_loss: float = float("inf")
    best_state: dict | None = None
    mark_epoch: int = 0  # the last epoch that made progress (patience)
    mark_score: float = float("-inf")
    mark_loss: float = float("inf")
    tail: dict | None = None
    tail_epochs: list[int] = field(default_factory=list)
    run: dict | None = None
    run_epochs: list[int] = field(default_factory=list)

    def observe(self, epoch: int, score: float, loss: float, model) -> None:
        """Record epoch `epoch`'s validation score and loss, the model holding its weights."""
        if better(score, loss, self.best_score, self.best_loss, ties=self.ties):
            self.best_score, self.best_loss, self.best_epoch = score, loss, epoch
            if self.keeps_state:
                self.best_state = copy.deepcopy(
                    {k: v.detach() for k, v in model.state_dict().items()}
                )
            if self.averaging:
                self.tail, self.tail_epochs = weights_sum(None, model), [epoch]
        elif self.averaging and self.tail is not None:
            self.tail, self.tail_epochs = weights_sum(self.tail, model), [*self.tail_epochs, epoch]
        if self.averaging and epoch >= 2:  # all but the first epoch (SWA's start after warm-up)
            self.run, self.run_epochs = weights_sum(self.run, model), [*self.run_epochs, epoch]
        if progressed(score, loss, self.mark_score, self.mark_loss):
            self.mark_epoch, self.mark_score, self.mark_loss = epoch, score, loss

    def means(self) -> list[tuple[list[int], dict]]:
        """The runs of epochs whose mean is worth scoring: more than one epoch each, keyed by
        their epochs (when the best epoch is epoch 2 the two means are one)."""
        if not self.averaging:
            return []
        runs = ((self.run_epochs, self.run), (self.tail_epochs, self.tail))
        unique = {tuple(e): t for e, t in runs if len(e) > 1 and t is not None}
        return [(list(e), t) for e, t in unique.items()]


def keep_average(
    model,
    candidates: list[tuple[list[int], dict]],
    selection: EpochSelection,
    score_validation,
    metric: str,
    mode: str,
) -> dict:
    """Score on validation the mean of the weights of each candidate run of epochs (all but
    the first epoch; the best epoch and those after it), load the best of them, and keep it
    only when it beats the best epoch's score; else the model is left for the caller to load
    the best state.

    The epochs after the best one sit on the validation plateau at a learning rate still far
    from zero; a mean of weights along the way lies where the loss surface is flatter
    (weight averaging, as in SWA, which starts after the first phase of training). Choosing
    it by validation cannot lower the validation score of what is kept.

    Args:
        candidates: (epochs, running sum of their weights) each.
        score_validation: the loaded model's validation score (a float).
    Returns:
        {"epochs", "validation", "kept", "tried": [{"epochs", "validation"}]} for the receipt.
    """
    best_state, best_epoch, best_score = (
        selection.best_state,
        selection.best_epoch,
        selection.best_score,
    )
    if best_state is None:
        raise ValueError("keep_average needs the best epoch's weights (keeps_state)")
    tried, best_mean = [], None
    for epochs, total in candidates:
        averaged = {
            k: (total[k] / len(epochs)).to(v.dtype) if k in total else v
            for k, v in best_state.items()
        }
        model.load_state_dict(averaged)
        model.eval()
        score = float(score_validation())
        tried.append({"epochs": epochs, "validation": score})
        write_line(
            f"mean of the weights of epochs {epochs[0]}-{epochs[-1]}: validation "
            f"{metric} {score:.4f}",
            mode,
        )
        if best_mean is None or score > best_mean[1]:
            best_mean = (averaged, score, epochs)
    if best_mean is None:
        raise ValueError("keep_average needs at least one candidate run of epochs")
    averaged, score, epochs = best_mean
    kept = score > best_score
    if kept:
        model.load_state_dict(averaged)
    write_line(
        f"keeping the mean of epochs {epochs[0]}-{epochs[-1]} ({score:.4f}) over epoch "
        f"{best_epoch} ({best_score:.4f})"
        if kept
        else f"keeping epoch {best_epoch} ({best_score:.4f})",
        mode,
    )
    return {"epochs": epochs, "validation": score, "kept": kept, "tried": tried}
