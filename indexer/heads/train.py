"""Fine-tune a classifier or NER head on the encoder and save it as a transformers model dir.

Recipe: AdamW (weight decay 0.01), linear warm-up over the first 10% of steps then linear
decay, gradient-norm clip 1.0, fixed seed. The validation split picks the best epoch; the
test split is only scored at the end. Runs on CPU; with dtype bf16 the training forward and
backward run under bf16 autocast, while weights, optimizer state and every score stay fp32.
`--head-only` runs the frozen backbone once through the index encoder (`indexer.encode.encoder`:
length-sorted batches under a token budget, bf16 weights where the CPU has them) and trains
the head on those cached features. What differs between a classifier and a tagger (model
class, loss, head layers, features, metric) is the head type's (`heads.types`). Does not read
files (see `data`).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from indexer.encode.encoder import default_streams
from indexer.errors import InputError, ModelError
from indexer.heads.data import HeadData, require_splits
from indexer.heads.features import Encoded, check_lengths, collate, training_batches
from indexer.heads.inference import model_logits, pad_id_of, score_logits
from indexer.heads.receipt import check_out_dir, package_versions, save_head_dir, weights_sha256
from indexer.heads.sentence import POOLING_KEY
from indexer.heads.types.base import HeadType
from indexer.heads.types.registry import head_type

log = logging.getLogger(__name__)

DEFAULT_LR = 2e-5
DEFAULT_HEAD_ONLY_LR = 1e-3  # a freshly initialised head alone moves little at 2e-5
WARMUP_RATIO = 0.1
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
FEATURE_BATCH_TOKENS = 2048  # --head-only feature pass: padded tokens per batch (benchmarks/head_feature_budget.py)
FEATURE_MAX_WASTE = 0.05  # and at most 5 % padding per sequence


@dataclass(frozen=True)
class TrainSettings:
    """One training run. `task`: a head type's name (`heads.types.registry`). `lr` None:
    DEFAULT_LR, or DEFAULT_HEAD_ONLY_LR with `head_only`; `batch_size` None: the head type's
    `default_batch_size` (32 sentences, 8 for a tagger)."""

    task: str
    base: Path
    out: Path
    head_only: bool = False
    epochs: int = 2
    lr: float | None = None
    max_length: int = 128
    batch_size: int | None = None  # None: the head type's default_batch_size
    seed: int = 42
    threads: int | None = None
    dtype: Literal["fp32", "bf16"] = "fp32"
    pooling: Literal["auto", "cls", "mean"] = "auto"
    probe_epochs: int = 0

    def __post_init__(self) -> None:
        _ = self.sentence_pooling  # refuses --pooling mean for NER before any work
        if self.batch_size is None:
            object.__setattr__(self, "batch_size", self.kind.default_batch_size)
        if self.probe_epochs and self.head_only:
            raise InputError("--probe-epochs warms the head before a full fine-tune; it has no "
                             "meaning with --head-only (use --epochs)")

    @property
    def caches_features(self) -> bool:
        """Runs the frozen backbone once for a head-only stage (`head_only` or `probe_epochs`)."""
        return self.head_only or self.probe_epochs > 0

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return DEFAULT_HEAD_ONLY_LR if self.head_only else DEFAULT_LR

    @property
    def kind(self) -> HeadType:
        """The head type being trained."""
        return head_type(self.task)

    @property
    def sentence_pooling(self) -> str | None:
        """Classifier pooling (`auto`: mean with head_only, else cls); None for NER."""
        return self.kind.pooling(self.pooling, self.head_only)


@dataclass
class FitResult:
    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    best_score: float = float("-inf")
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time (all threads): steadier than wall time when shared
    feature_seconds: float = 0.0


def set_threads(threads: int | None = None) -> int:
    """Size torch's intra-op pool: `threads`, else OMP_NUM_THREADS, else every CPU this
    process may run on (on a shared machine, OMP_NUM_THREADS=1 avoids spin-wait stalls)."""
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        threads = int(os.environ["OMP_NUM_THREADS"])
    if threads is None:
        try:
            threads = len(os.sched_getaffinity(0))
        except AttributeError:
            threads = os.cpu_count() or 1
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


def resolve_dtype(dtype: str) -> Literal["fp32", "bf16"]:
    """`model.dtype` of the config for CPU training: auto -> bf16 on CPUs with native bf16."""
    from indexer.encode.encoder import cpu_has_bf16

    if dtype == "auto":
        return "bf16" if cpu_has_bf16() else "fp32"
    if dtype not in ("fp32", "bf16"):
        raise ModelError(f"training on CPU supports model.dtype fp32, bf16 or auto, not '{dtype}'")
    return dtype  # type: ignore[return-value]


def _autocast(dtype: str):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")


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
        tokenizer = AutoTokenizer.from_pretrained(settings.base)
        model = kind.model_class().from_pretrained(
            settings.base,
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={name: i for i, name in enumerate(label_names)},
        )
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load base model from {settings.base}: {exc}") from None
    pooling = settings.sentence_pooling
    if pooling is not None:
        setattr(model.config, POOLING_KEY, pooling)  # saved in config.json; read by every loader
    kind.check_model(model, tokenizer, str(settings.base))
    return model, tokenizer


def encode_splits(tokenizer, data: HeadData, max_length: int) -> dict[str, Encoded]:
    """Tokenise every split and refuse over-long examples before any training starts."""
    kind = head_type(data.task)
    encoded = {split: kind.encode(tokenizer, examples) for split, examples in data.splits.items()}
    check_lengths(encoded, max_length)
    return encoded


def feature_encoder(settings: TrainSettings, batch_tokens: int = FEATURE_BATCH_TOKENS):
    """The frozen backbone as the index's Encoder: same batching (streams, at most 5 % padding
    per sequence), bf16 weights when `settings.dtype` is bf16. Loaded from `settings.base`,
    the weights the head sits on."""
    from indexer.config import ModelConfig
    from indexer.encode.encoder import Encoder

    pooling = settings.sentence_pooling or "cls"  # NER reads token states, not a pooled vector
    config = ModelConfig(name=str(settings.base), pooling=pooling, normalize=pooling == "mean",
                         max_length=max(8, settings.max_length), batch_tokens=batch_tokens,
                         max_waste=FEATURE_MAX_WASTE, device="cpu", dtype=settings.dtype)
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
    feats = {name: kind.backbone_features(encoder, enc)
             for name, enc in (("train", train), ("validation", val))}
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


def _linear_warmup_decay(step: int, warmup: int, total: int) -> float:
    """lr multiplier: linear from 1/warmup to 1 over `warmup` steps, then linear to 0."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def fit(model, tokenizer, data: HeadData, encoded: dict[str, Encoded], settings: TrainSettings,
        progress: bool = False) -> FitResult:
    """Train for `settings.epochs`, score validation after each, load the best epoch's state.

    With `head_only` the backbone is frozen and run once: its features are cached and only
    the head trains on them (an order of magnitude less work). With `probe_epochs` (a full
    fine-tune only), that head-only stage runs first for `probe_epochs` at the head-only
    rate, then the whole model fine-tunes from the fitted head (LP-FT); the best epoch is
    picked among the fine-tuning epochs, the probe's scores are kept in the history.
    """
    require_splits(data, "train", "validation")
    started, cpu_started = time.perf_counter(), time.process_time()
    seed_everything(settings.seed)
    train, val = encoded["train"], encoded["validation"]
    rng = np.random.default_rng(settings.seed)
    result = FitResult()

    if settings.caches_features:
        modules, step_loss, val_logits, result.feature_seconds = _head_only_steps(model, train, val, settings)
        probe = not settings.head_only
        _train_epochs(model, modules, step_loss, val_logits, np.ones(len(train), dtype=np.int64),
                      data, val, settings, rng, result, progress,
                      epochs=settings.probe_epochs if probe else settings.epochs,
                      lr=DEFAULT_HEAD_ONLY_LR if probe else settings.learning_rate,
                      stage="probe" if probe else None)
    if not settings.head_only:
        for p in model.parameters():
            p.requires_grad_(True)
        pad_id = pad_id_of(tokenizer)

        def full_loss(index) -> torch.Tensor:
            with _autocast(settings.dtype):
                return settings.kind.loss(model, collate(train, index, pad_id))

        def full_val_logits() -> list[torch.Tensor]:
            return model_logits(settings.kind, model, val, pad_id, settings.batch_size * 2)

        _train_epochs(model, [model], full_loss, full_val_logits, train.lengths, data, val,
                      settings, rng, result, progress, epochs=settings.epochs,
                      lr=settings.learning_rate)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(True)
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    return result


def _train_epochs(model, modules, step_loss, val_logits, lengths: np.ndarray, data: HeadData,
                  val: Encoded, settings: TrainSettings, rng, result: FitResult, progress: bool,
                  epochs: int, lr: float, stage: str | None = None) -> None:
    """AdamW over the parameters that require grad for `epochs`, validation after each.

    Without `stage`, the best epoch's state is tracked in `result` and loaded at the end;
    a `stage` (the LP-FT probe) only appends its epochs to the history under that name.
    """
    kind = settings.kind
    metric = kind.metric
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=WEIGHT_DECAY)
    steps_per_epoch = -(-len(lengths) // settings.batch_size)
    total = steps_per_epoch * epochs
    warmup = int(WARMUP_RATIO * total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _linear_warmup_decay(s, warmup, total))
    best_state = None
    name = f"{stage} " if stage else ""
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        for module in modules:
            module.train()
        batches = training_batches(lengths, settings.batch_size, rng)
        loss_sum, seen = 0.0, 0
        bar = tqdm(batches, desc=f"{name}epoch {epoch}/{epochs}", unit="batch",
                   disable=not progress, leave=True, dynamic_ncols=True)
        for index in bar:
            loss = step_loss(index)
            if not torch.isfinite(loss):
                raise ModelError(f"{name}epoch {epoch}: the loss became {loss.item()}; lower --lr")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.item() * len(index)
            seen += len(index)
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}", refresh=False)
        train_seconds = time.perf_counter() - t0
        model.eval()
        scores = score_logits(kind, val_logits(), data.splits["validation"], val, data.label_names)
        entry = {
            "epoch": epoch,
            "train_loss": round(loss_sum / seen, 6),
            "validation": {metric: scores[metric]},
            "train_seconds": round(train_seconds, 2),
            "seconds": round(time.perf_counter() - t0, 2),
        }
        if stage:
            entry["stage"] = stage
        result.history.append(entry)
        log.info("%sepoch %d: loss %.4f, validation %s %.4f", name, epoch, loss_sum / seen, metric,
                 scores[metric])
        if stage is None and scores[metric] > result.best_score:
            result.best_score, result.best_epoch = scores[metric], epoch
            best_state = copy.deepcopy({k: v.detach() for k, v in model.state_dict().items()})
    if best_state is not None and result.best_epoch != epochs:
        model.load_state_dict(best_state)


def score_split(model, tokenizer, data: HeadData, encoded: dict[str, Encoded], split: str,
                batch_size: int = 64) -> dict:
    """Score the current model on one split (full metrics)."""
    kind = head_type(data.task)
    logits = model_logits(kind, model, encoded[split], pad_id_of(tokenizer), batch_size)
    return score_logits(kind, logits, data.splits[split], encoded[split], data.label_names)


def build_receipt(settings: TrainSettings, data: HeadData, fitted: FitResult, validation: dict,
                  test: dict | None, baseline: dict | None, threads: int) -> dict:
    """Everything needed to trust or redo the run, as a JSON-ready dict."""
    n_train = len(data.splits["train"])
    kind = settings.kind
    metric = kind.metric
    receipt = {
        "task": settings.task,
        "metric": metric,
        "out": str(settings.out),
        "label_names": data.label_names,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "base_model": {"path": str(settings.base), "weights_sha256": weights_sha256(settings.base)},
        "recipe": {
            "optimizer": "AdamW", "lr": settings.learning_rate, "weight_decay": WEIGHT_DECAY,
            "schedule": f"linear warm-up {WARMUP_RATIO:.0%} of steps, then linear decay to 0",
            "epochs": settings.epochs, "batch_size": settings.batch_size, "grad_clip": GRAD_CLIP,
            "seed": settings.seed, "max_length": settings.max_length,
            "head_only": settings.head_only, "threads": threads,
            "pooling": settings.sentence_pooling,
            "autocast": None if settings.head_only else settings.dtype,
            "probe_epochs": settings.probe_epochs,
            "probe_lr": DEFAULT_HEAD_ONLY_LR if settings.probe_epochs else None,
            "feature_pass": (f"index encoder, {settings.dtype} weights, {FEATURE_BATCH_TOKENS} padded "
                             f"tokens per batch, at most {FEATURE_MAX_WASTE:.0%} padding per sequence, "
                             f"{default_streams(torch.device('cpu'), threads)} stream(s)")
            if settings.caches_features else None,
            "scores_dtype": "fp32",
            "batches": "length-sorted pools of 50 batches, shuffled",
            "ner_decode": kind.decode_note,
        },
        "data": {s: {"source": data.sources[s], "examples": len(e)} for s, e in data.splits.items()},
        "reviewed": data.reviewed,  # human labels added to train (`--reviewed`), or None
        "epochs": fitted.history,
        "best_epoch": fitted.best_epoch,
        "best_validation": fitted.best_score,
        "validation": validation,
        "test": test,
        "baseline": baseline,
        "training_seconds": round(fitted.seconds, 2),
        "training_cpu_seconds": round(fitted.cpu_seconds, 2),
        "feature_seconds": round(fitted.feature_seconds, 2) if settings.caches_features else None,
        "examples_per_second": round(n_train * settings.epochs / fitted.seconds, 2),
        "versions": package_versions(),
    }
    receipt.update(kind.receipt_fields(validation, test))
    return receipt


def train_head(data: HeadData, settings: TrainSettings, progress: bool = False) -> dict:
    """Load base → encode (refuse over-long) → fit → score → baseline → save; the one training
    path (`bertindex train` runs it through the `train_head` flow).

    Args:
        data: the labelled splits (`data.read_head_data`), with train and validation.
        settings: the run; `settings.out` must be new, empty, or an earlier head.
        progress: show a progress bar per epoch (stderr).
    Returns:
        The run receipt, as saved beside the head (`receipt.RECEIPT`).
    """
    if data.task != settings.task:
        raise InputError(f"the data were read for '{data.task}', the settings say '{settings.task}'")
    require_splits(data, "train", "validation")
    check_out_dir(Path(settings.out))
    threads = set_threads(settings.threads)
    model, tokenizer = load_base(settings, data.label_names)
    encoded = encode_splits(tokenizer, data, settings.max_length)
    fitted = fit(model, tokenizer, data, encoded, settings, progress=progress)
    validation = score_split(model, tokenizer, data, encoded, "validation")
    test = score_split(model, tokenizer, data, encoded, "test") if "test" in data.splits else None
    baseline = settings.kind.baseline(data.splits, data.label_names, settings.seed)
    receipt = build_receipt(settings, data, fitted, validation, test, baseline, threads)
    save_head_dir(model, tokenizer, receipt, Path(settings.out))
    return receipt
