"""Fine-tune a classifier or NER head on the encoder and save it as a transformers model dir.

Recipe: AdamW (weight decay 0.01), linear warm-up then linear decay, gradient-norm clip 1.0,
fixed seed. By default (`epochs="auto"`) it trains until the validation score has not improved
for `patience` epochs (at most `max_epochs`), with the batch size and max length chosen from
the data (`heads.settings`, `heads.schedule`); a fixed epoch count is the seeds' recipe (10 %
warm-up over those epochs, 32 examples a step, 8 for a tagger). The validation split picks the
best epoch, whose state is kept; the test split is only scored at the end. Runs on CPU; with
dtype bf16 the training forward and backward run under bf16 autocast, while weights,
optimizer state and every score stay fp32. `--head-only` runs the frozen backbone once through
the index encoder (`indexer.encode.encoder`: length-sorted batches under a token budget, bf16
weights where the CPU has them) and trains the head on those cached features. What differs between a
classifier and a tagger (model class, loss, head layers, features, metric) is the head type's
(`heads.base.HeadType`). Does not read files (see `data`).
"""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from indexer.config import MAX_POSITIONS
from indexer.core.machine import set_threads
from indexer.core.progress import Mode, ProgressArg, as_mode, clock, write_line
from indexer.encode.model_facts import load_transformer, usable_length
from indexer.errors import InputError, ModelError
from indexer.heads.data import HeadData, require_splits
from indexer.heads.features import Encoded, collate, training_batches
from indexer.heads.inference import model_logits, pad_id_of, score_logits
from indexer.heads.receipt import baseline_warning, build_receipt, check_out_dir, save_head_dir
from indexer.heads.registry import HEAD_TYPE_KEY, head_type
from indexer.heads.schedule import AUTO_WARMUP_RATIO, WARMUP_RATIO, EpochRule
from indexer.heads.selection import MIN_DELTA, EpochSelection, keep_average
from indexer.heads.sentence import POOLING_KEY
from indexer.heads.settings import (
    DEFAULT_HEAD_ONLY_LR,
    FEATURE_BATCH_TOKENS,
    FEATURE_MAX_WASTE,
    TrainSettings,
)
from indexer.heads.split_scores import blend_head, raw_text_split, score_split
from indexer.training.schedule import plan_schedule
from indexer.training.trainer import Trainer, autocast, run_epoch

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    best_score: float = float("-inf")
    epochs_run: int = 0  # of the main stage (not the probe)
    stop_reason: str = ""  # "patience", "max_epochs" or "epochs"
    stop_message: str = ""
    schedule: str = ""
    seconds: float = 0.0
    # this process's CPU time (all threads): steadier than wall time when shared
    cpu_seconds: float = 0.0
    feature_seconds: float = 0.0
    # auto epochs: the better of two means of the weights (epochs 2 on; the best epoch on),
    # scored on validation, kept when it beats the best epoch
    # (`heads.selection.keep_average`'s record)
    average: dict | None = None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_base(settings: TrainSettings, label_names: list[str]):
    """Load the base encoder with a fresh head of `settings.kind` for `label_names`, and its
    tokenizer.

    Returns:
        (model, tokenizer)
    """
    from transformers import AutoTokenizer

    seed_everything(settings.seed)  # the new head's initial weights
    kind = settings.kind
    try:
        # e.g. a tagger's byte-level BPE gets a prefix space for its pre-split words
        tokenizer = kind.prepare_tokenizer(
            AutoTokenizer.from_pretrained(settings.base), str(settings.base)
        )
        model, _ = load_transformer(
            settings.base,
            kind.model_class(),
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={name: i for i, name in enumerate(label_names)},
        )
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load base model from {settings.base}: {exc}") from None
    pooling = settings.sentence_pooling
    if pooling is not None:
        setattr(model.config, POOLING_KEY, pooling)  # saved in config.json; read by every loader
    setattr(model.config, HEAD_TYPE_KEY, kind.name)  # which head type loads it (`head_type_of`)
    kind.check_model(model, tokenizer, str(settings.base))
    return model, tokenizer


def encode_splits(tokenizer, data: HeadData) -> dict[str, Encoded]:
    """Tokenise every split, whole (`TrainSettings.resolve` then refuses over-long examples
    before any training starts)."""
    kind = head_type(data.task)
    return {split: kind.encode(tokenizer, examples) for split, examples in data.splits.items()}


def feature_encoder(settings: TrainSettings, batch_tokens: int = FEATURE_BATCH_TOKENS):
    """The frozen backbone as the index's Encoder: same batching (streams, at most 5 % padding
    per sequence), bf16 weights when `settings.dtype` is bf16. Loaded from `settings.base`,
    the weights the head sits on."""
    from indexer.config import ModelConfig
    from indexer.encode.encoder import Encoder

    pooling = settings.sentence_pooling or "cls"  # NER reads token states, not a pooled vector
    config = ModelConfig(
        name=str(settings.base),
        pooling=pooling,
        normalize=pooling == "mean",
        max_length=max(8, settings.max_length)
        if isinstance(settings.max_length, int)
        else MAX_POSITIONS,
        batch_tokens=batch_tokens,
        max_waste=FEATURE_MAX_WASTE,
        device="cpu",
        dtype=settings.dtype,
    )
    return Encoder(config)


def _head_only_steps(model, train: Encoded, val: Encoded, settings: TrainSettings):
    """Freeze the backbone, run it once over train and validation, and train on the cache.

    Returns:
        (modules to put in train mode, step_loss(index), val_logits(), feature seconds)
    """
    kind = settings.kind
    modules = kind.head_modules(model)
    for p in model.parameters():
        p.requires_grad_(False)
    for module in modules:
        for p in module.parameters():
            p.requires_grad_(True)
    model.eval()
    t0 = time.perf_counter()
    encoder = feature_encoder(settings)
    feats = {
        name: kind.backbone_features(encoder, enc)
        for name, enc in (("train", train), ("validation", val))
    }
    del encoder
    seconds = time.perf_counter() - t0
    labels = kind.feature_targets(train)  # one label per feature row
    width = feats["train"][0].shape[-1]

    def step_loss(index) -> torch.Tensor:
        x = torch.cat([feats["train"][i].reshape(-1, width) for i in index])  # (rows, hidden)
        y = torch.cat([labels[i].reshape(-1) for i in index])
        return torch.nn.functional.cross_entropy(kind.feature_logits(model, x), y)

    def val_logits() -> list[torch.Tensor]:
        fv = feats["validation"]  # (hidden,) or (rows, hidden) per example
        with torch.inference_mode():
            out = kind.feature_logits(model, torch.cat([f.reshape(-1, width) for f in fv]))
            rows = out.split([f.reshape(-1, width).shape[0] for f in fv])
            return [r.reshape(*f.shape[:-1], -1) for r, f in zip(rows, fv)]  # (C,) or (rows, C)

    return modules, step_loss, val_logits, seconds


def fit(
    model,
    tokenizer,
    data: HeadData,
    encoded: dict[str, Encoded],
    settings: TrainSettings,
    progress: ProgressArg = False,
) -> FitResult:
    """Train by `settings.epoch_rule`, score validation after each epoch, load the best
    epoch's state.

    With `head_only` the backbone is frozen and run once: its features are cached and only
    the head trains on them (an order of magnitude less work). With `probe_epochs` (a full
    fine-tune only), that head-only stage runs first for `probe_epochs` at the head-only
    rate, then the whole model fine-tunes from the fitted head (LP-FT); the best epoch is
    picked among the fine-tuning epochs, the probe's scores are kept in the history.
    `settings` must be resolved (`TrainSettings.resolve`): a concrete batch size.

    Args:
        progress: a progress mode (`indexer.core.progress`): a bar per epoch, or one line per epoch
            (and one a minute within long epochs), or nothing.
    """
    require_splits(data, "train", "validation")
    if settings.batch_size is None:
        raise ValueError("fit() needs resolved settings (TrainSettings.resolve)")
    started, cpu_started = time.perf_counter(), time.process_time()
    seed_everything(settings.seed)
    train, val = encoded["train"], encoded["validation"]
    rng = np.random.default_rng(settings.seed)
    result = FitResult()
    mode = as_mode(progress)

    if settings.caches_features:
        modules, step_loss, val_logits, result.feature_seconds = _head_only_steps(
            model, train, val, settings
        )
        probe = not settings.head_only
        stage = Stage(
            model,
            modules,
            step_loss,
            val_logits,
            np.ones(len(train), dtype=np.int64),
            rule=EpochRule(settings.probe_epochs) if probe else settings.epoch_rule,
            lr=DEFAULT_HEAD_ONLY_LR if probe else settings.learning_rate,
            name="probe" if probe else None,
        )
        train_epochs(stage, data, val, settings, rng, result, mode)
    if not settings.head_only:
        for p in model.parameters():
            p.requires_grad_(True)
        pad_id = pad_id_of(tokenizer)

        def full_loss(index) -> torch.Tensor:
            with autocast(settings.dtype):
                return settings.kind.loss(model, collate(train, index, pad_id))

        def full_val_logits() -> list[torch.Tensor]:
            return model_logits(settings.kind, model, val, pad_id, settings.resolved_batch_size * 2)

        stage = Stage(
            model,
            [model],
            full_loss,
            full_val_logits,
            train.lengths,
            rule=settings.epoch_rule,
            lr=settings.learning_rate,
        )
        train_epochs(stage, data, val, settings, rng, result, mode)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(True)
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    return result


@dataclass
class Stage:
    """One run of epochs: what trains and how its loss and validation logits are computed.

    Attributes:
        modules: put in train mode before each epoch (the head only, or the whole model).
        step_loss: a batch's loss from its example indices (forward under the run's autocast).
        val_logits: the validation split's logits, one tensor per example.
        lengths: per training example, its token count (batches group similar lengths).
        rule: how many epochs (`heads.schedule.EpochRule`).
        name: None for the main stage (its best epoch is kept, `rule` may stop early); a name
            (the LP-FT "probe") only appends its epochs to the history under that name.
    """

    model: torch.nn.Module
    modules: list
    step_loss: Callable[[np.ndarray], torch.Tensor]
    val_logits: Callable[[], list[torch.Tensor]]
    lengths: np.ndarray
    rule: EpochRule
    lr: float
    name: str | None = None


def train_epochs(
    stage: Stage,
    data: HeadData,
    val: Encoded,
    settings: TrainSettings,
    rng,
    result: FitResult,
    mode: Mode,
) -> None:
    """AdamW (`indexer.training.Trainer`) over the parameters that require grad, epochs by
    `stage.rule`, validation after each; the main stage's kept weights are loaded at the end
    (the best epoch's, or a mean of epochs that scored higher)."""
    kind, rule = settings.kind, stage.rule
    params = [p for p in stage.model.parameters() if p.requires_grad]
    batch_size = settings.resolved_batch_size
    steps_per_epoch = -(-len(stage.lengths) // batch_size)
    ratio = AUTO_WARMUP_RATIO if rule.patience is not None else WARMUP_RATIO
    trainer = Trainer(params, stage.lr, plan_schedule(steps_per_epoch, rule.limit, ratio))
    selection = EpochSelection(
        averaging=rule.patience is not None and stage.name is None,
        keeps_state=stage.name is None,
        ties=rule.patience is not None,
    )
    name = f"{stage.name} " if stage.name else ""
    of = f"/{rule.limit}" if rule.patience is None else f" (max {rule.limit})"
    val_targets = kind.feature_targets(val)  # per example, the label ids of its logits' rows
    started = time.perf_counter()
    epoch, reason = 0, None
    while not reason:
        epoch += 1
        t0 = time.perf_counter()
        for module in stage.modules:
            module.train()
        batches = training_batches(stage.lengths, batch_size, rng)
        epoch_loss = run_epoch(
            trainer,
            batches,
            stage.step_loss,
            f"{name}epoch {epoch}{of}",
            mode,
            where=f"{name}epoch {epoch}",
        )
        train_seconds = time.perf_counter() - t0
        stage.model.eval()
        logits = stage.val_logits()
        scores = score_logits(kind, logits, data.splits["validation"], val, data.label_names)
        score = scores[kind.metric]
        val_loss = kind.validation_loss(logits, val_targets, stage.model)
        selection.observe(epoch, score, val_loss, stage.model)
        entry = {
            "epoch": epoch,
            "train_loss": round(epoch_loss.mean, 6),
            "validation": {kind.metric: score},
            "validation_loss": round(val_loss, 6),
            "lr_end": trainer.lr,
            "train_seconds": round(train_seconds, 2),
            "seconds": round(time.perf_counter() - t0, 2),
        }
        if stage.name:
            entry["stage"] = stage.name
        result.history.append(entry)
        reason = rule.stop_after(epoch, selection.mark_epoch)
        _report_epoch(
            f"{name}epoch {epoch}{of}",
            epoch,
            epoch_loss.mean,
            score,
            selection,
            rule,
            reason,
            time.perf_counter() - started,
            kind.metric,
            mode,
        )
    if stage.name is None:
        result.schedule = trainer.schedule.describe()
        _keep_chosen(stage, selection, epoch, reason, data, val, settings, result, mode)


def _report_epoch(
    label: str,
    epoch: int,
    loss: float,
    score: float,
    selection: EpochSelection,
    rule: EpochRule,
    reason: str | None,
    elapsed: float,
    metric: str,
    mode: str,
) -> None:
    """One line per epoch: losses, scores, the best so far and how long the run may go on."""
    per_epoch = elapsed / epoch
    fewest, most = rule.remaining(epoch, selection.mark_epoch)
    if reason:
        eta = "done"
    elif fewest == most:
        eta = f"ETA {clock(most * per_epoch)}"
    else:
        eta = (
            f"ETA {clock(fewest * per_epoch)} if it stops at epoch {epoch + fewest}, "
            f"at most {clock(most * per_epoch)}"
        )
    write_line(
        f"{label}: train loss {loss:.4f}, validation {metric} {score:.4f}, best "
        f"{selection.best_score:.4f} (epoch {selection.best_epoch}), elapsed "
        f"{clock(elapsed)}, {eta}",
        mode,
    )
    log.info("%s: loss %.4f, validation %s %.4f", label, loss, metric, score)


def _keep_chosen(
    stage: Stage,
    selection: EpochSelection,
    epoch: int,
    reason: str,
    data: HeadData,
    val: Encoded,
    settings: TrainSettings,
    result: FitResult,
    mode: str,
) -> None:
    """Record why the main stage stopped and load the weights it keeps."""
    kind, rule, model = settings.kind, stage.rule, stage.model
    best_score, best_epoch = selection.best_score, selection.best_epoch
    result.best_score, result.best_epoch = best_score, best_epoch
    result.epochs_run, result.stop_reason = epoch, reason
    if reason == "patience":
        result.stop_message = (
            f"stopped early after epoch {epoch}: validation {kind.metric} has "
            f"not improved by {MIN_DELTA} since epoch {selection.mark_epoch} "
            f"({rule.patience} epochs); keeping epoch {best_epoch} "
            f"({best_score:.4f})"
        )
    elif reason == "max_epochs":
        result.stop_message = (
            f"reached --max-epochs {rule.limit} (validation {kind.metric} "
            f"still improving within the last {rule.patience} epochs); "
            f"keeping epoch {best_epoch} ({best_score:.4f})"
        )
    else:
        result.stop_message = (
            f"ran the {rule.limit} epoch(s) asked for; keeping epoch "
            f"{best_epoch} ({best_score:.4f})"
        )
    write_line(result.stop_message, mode)
    means = selection.means()
    if means:

        def score_validation() -> float:
            return score_logits(
                kind, stage.val_logits(), data.splits["validation"], val, data.label_names
            )[kind.metric]

        result.average = keep_average(model, means, selection, score_validation, kind.metric, mode)
        if result.average["kept"]:
            return
    # a mean scored and not kept left its weights in the model: the best epoch's come back
    # even when it was the last
    if selection.best_state is not None and (best_epoch != epoch or result.average is not None):
        model.load_state_dict(selection.best_state)


def train_head(data: HeadData, settings: TrainSettings, progress: ProgressArg = False) -> dict:
    """Load base → encode → choose batch size and max length (refuse over-long) → fit → score
    → baseline → save; the one training path (`bertindex train` runs it through the
    `train_head` flow).

    Args:
        data: the labelled splits (`data.read_head_data`), with train and validation.
        settings: the run; `settings.out` must be new, empty, or an earlier head.
        progress: a progress mode (`indexer.core.progress`): "bar" (a bar per epoch), "lines" (a
            line per epoch, for logs), "off"; True is "bar".
    Returns:
        The run receipt, as saved beside the head (`receipt.RECEIPT`). Its `warnings` hold
        the baseline warning (also logged) when the head does not beat the baseline.
    """
    if data.task != settings.task:
        raise InputError(
            f"the data were read for '{data.task}', the settings say '{settings.task}'"
        )
    require_splits(data, "train", "validation")
    check_out_dir(Path(settings.out))
    threads = set_threads(settings.threads)
    model, tokenizer = load_base(settings, data.label_names)
    settings.kind.fit_config(model, data)
    encoded = encode_splits(tokenizer, data)
    settings, choices = settings.resolve(encoded, usable_length(model, tokenizer))
    for key in ("max_length", "batch_size"):
        if choices[key] != "given":
            write_line(f"{key.replace('_', ' ')}: {choices[key]}", progress)
    fitted = fit(model, tokenizer, data, encoded, settings, progress=progress)
    scratch = Path(tempfile.mkdtemp(prefix="bertindex-blend-"))
    try:
        return _finish(
            model, tokenizer, data, encoded, settings, fitted, threads, choices, progress, scratch
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _finish(
    model,
    tokenizer,
    data: HeadData,
    encoded: dict[str, Encoded],
    settings: TrainSettings,
    fitted: FitResult,
    threads: int,
    choices: dict,
    progress,
    scratch: Path,
) -> dict:
    """After `fit`: blend, score validation and test, baseline, receipt, save."""
    if settings.blend == "tuned" and settings.kind.blend_tunes(model):
        write_line("fine-tuning the bi-encoder of the blend on the train pairs", progress)
    blend, logits, folders = blend_head(model, tokenizer, data, encoded, settings, scratch)
    options = blend.pop("options", {}) if blend is not None else {}
    if blend is not None:
        write_line(
            f"blend with the bi-encoder: weight {blend['weight']} (validation "
            f"{blend['alone']:.4f} alone -> {blend['validation']:.4f})",
            progress,
        )
    validation = score_split(
        model,
        tokenizer,
        data,
        encoded,
        "validation",
        logits=logits["validation"],
        options=options.get("validation"),
    )
    test = (
        score_split(
            model,
            tokenizer,
            data,
            encoded,
            "test",
            logits=logits["test"],
            options=options.get("test"),
        )
        if "test" in data.splits
        else None
    )
    raw_text = raw_text_split(model, tokenizer, data, settings.kind, str(settings.out))
    baseline = settings.kind.baseline(
        data.splits, data.label_names, settings.seed, base=settings.base
    )
    metric = settings.kind.metric
    warning = baseline_warning(
        metric,
        validation[metric],
        baseline,
        len(data.splits["validation"]),
        {
            "auto_epochs": settings.auto_epochs,
            "head_only": settings.head_only or not settings.kind.head_only,
        },
    )
    if warning:
        log.warning("%s", warning["message"])
    receipt = build_receipt(
        settings,
        data,
        fitted,
        validation,
        test,
        baseline,
        threads,
        choices,
        [warning] if warning else [],
    )
    if raw_text is not None:
        receipt["raw_text"] = raw_text
    if blend is not None:
        receipt["blend"] = blend
    save_head_dir(model, tokenizer, receipt, Path(settings.out), folders)
    return receipt
