"""One `bertindex adapt` run: continued masked-LM pretraining of an encoder, resumable.

AdamW (weight decay 0.01) with linear warm-up over `WARMUP_RATIO` of the steps, then linear
decay to 0 at the run's horizon (the smaller of `epochs` passes and `max_tokens` tokens),
gradient-norm clip 1.0, bf16 autocast where the CPU has native bf16 (weights, optimizer
state and scores fp32). Sequences are batched by similar length (`heads.features`). A
held-out slice is scored before training and after each epoch (and where `max_tokens` ends
the run) with the same masks every time, so its loss and masked-token accuracy compare
across epochs.

Resuming: every `checkpoint_seconds` (and `checkpoint_steps`, and at each epoch's end) the
whole state (weights, optimizer and schedule (`indexer.training.Trainer`), the `TrainState`
dataclass: position and history) is written atomically to
`OUT/adapt-checkpoint.pt`. A run started again with the same settings on the same data
continues from it; every random draw (batch order per epoch, masks and dropout per step) is a
function of the seed and the position, so a resumed run ends with the weights an
uninterrupted one has. The receipt is written last: a directory with `adapt-receipt.json`
is finished, and the checkpoint is then removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from indexer.adapt.corpus import Corpus, Sequences, build_corpus
from indexer.adapt.masking import MaskRule, mask_tokens
from indexer.adapt.mlm import head_logits, load_mlm, mlm_loss, save_adapted
from indexer.core.faults import crash_point
from indexer.core.fsio import fsync_file
from indexer.core.machine import set_threads
from indexer.core.progress import Progress, ProgressArg, as_mode, clock, write_line
from indexer.encode.model_facts import (
    check_length,
    special_tokens,
    takes_token_types,
    usable_length,
)
from indexer.encode.policy import resolve_dtype
from indexer.errors import InputError, ModelError
from indexer.heads.features import training_batches
from indexer.training.schedule import GRAD_CLIP, WEIGHT_DECAY, Schedule
from indexer.training.trainer import Trainer, save_atomic

log = logging.getLogger(__name__)

RECEIPT = "adapt-receipt.json"
CHECKPOINT = "adapt-checkpoint.pt"
WARMUP_RATIO = 0.06  # RoBERTa's continued-pretraining (DAPT) recipe warms up over 6 %
DEFAULT_LR = 5e-5
EVAL_BATCH = 64
HELD_OUT_SEED = 7919  # the held-out masks' own seed offset: the same masks every epoch


@dataclass(frozen=True)
class AdaptSettings:
    """One run. `max_tokens` None: `epochs` whole passes; else the run stops once that many
    (non-padding) tokens have been trained on, at most `epochs` passes."""

    base: Path
    out: Path
    epochs: int = 1
    max_tokens: int | None = None
    max_length: int = 128
    batch_size: int = 32
    lr: float = DEFAULT_LR
    warmup_ratio: float = WARMUP_RATIO
    seed: int = 42
    held_out: float = 0.02
    rule: MaskRule = field(default_factory=MaskRule)
    dtype: str = "auto"
    threads: int | None = None
    checkpoint_seconds: float = 300.0
    checkpoint_steps: int | None = None

    def fingerprint(self, corpus: Corpus) -> str:
        """What a checkpoint must match to be resumed: the settings that shape the run and
        the data's size."""
        keep: dict[str, object] = {
            k: str(v)
            for k, v in asdict(self).items()
            if k not in ("out", "threads", "checkpoint_seconds", "checkpoint_steps")
        }
        keep["data"] = [corpus.provenance.get("documents"), corpus.provenance.get("tokens")]
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def check_out(out: Path) -> str:
    """ "new", or "resume" (a checkpoint and no receipt).

    Raises:
        InputError: `out` holds a finished adaptation, or other files.
    """
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return "new"
    if not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory; give a new one")
    if (out / RECEIPT).is_file():
        raise InputError(
            f"--out {out}: holds a finished adaptation ({RECEIPT}); give a new "
            "directory (or remove it to run again)"
        )
    if (out / CHECKPOINT).is_file():
        return "resume"
    raise InputError(
        f"--out {out}: exists and holds neither an adaptation in progress "
        f"({CHECKPOINT}) nor is empty; give a new or empty directory"
    )


def _collate(seqs: Sequences, index, pad_id: int, whole_word: bool):
    rows = [seqs.ids[i] for i in index]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    cand = torch.zeros((len(rows), width), dtype=torch.bool)
    words = torch.full((len(rows), width), -1, dtype=torch.long) if whole_word else None
    for j, i in enumerate(index):
        n = len(seqs.ids[i])
        ids[j, :n] = torch.from_numpy(seqs.ids[i].astype(np.int64))
        mask[j, :n] = 1
        cand[j, :n] = torch.from_numpy(seqs.candidates[i])
        if words is not None:
            words[j, :n] = torch.from_numpy(seqs.words[i].astype(np.int64))
    return ids, mask, cand, words


class _Masker:
    """The masking rule bound to one tokenizer."""

    def __init__(self, tokenizer, rule: MaskRule, where: str):
        if tokenizer.mask_token_id is None:
            raise ModelError(
                f"{where}: the tokenizer has no mask token; masked-LM "
                "adaptation needs one ([MASK], <mask>)"
            )
        self.mask_id = int(tokenizer.mask_token_id)
        specials = set(tokenizer.all_special_ids)
        self.random_ids = torch.tensor(
            [i for i in range(len(tokenizer)) if i not in specials], dtype=torch.long
        )
        self.rule = rule

    def batch(self, seqs: Sequences, index, pad_id: int, generator: torch.Generator) -> dict:
        ids, mask, cand, words = _collate(seqs, index, pad_id, self.rule.whole_word)
        inputs, labels = mask_tokens(
            ids, cand, self.mask_id, self.random_ids, self.rule, generator, words
        )
        return {"input_ids": inputs, "attention_mask": mask, "labels": labels}


def _step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step) % (2**63 - 1)


def _score(
    model, seqs: Sequences, masker: _Masker, pad_id: int, seed: int, head, token_types: bool
) -> dict:
    """Held-out loss and masked-token accuracy, with the same masks every call."""
    if not len(seqs):
        return {"loss": None, "accuracy": None, "masked": 0}
    generator = torch.Generator().manual_seed(_step_seed(seed + HELD_OUT_SEED, 0))
    order = np.argsort(seqs.lengths, kind="stable")
    total, correct, count = 0.0, 0, 0
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), EVAL_BATCH):
            batch = masker.batch(seqs, order[start : start + EVAL_BATCH], pad_id, generator)
            loss, right, n = mlm_loss(model, batch, head, token_types)
            total += float(loss) * n
            correct += int(right)
            count += n
    return {
        "loss": round(total / count, 6) if count else None,
        "accuracy": round(correct / count, 6) if count else None,
        "masked": count,
    }


@dataclass
class TrainState:
    """Where a run stands, saved whole in every checkpoint: a resumed run continues from it
    exactly (batch order, masks and dropout are functions of the seed and `step`)."""

    epoch: int = 1
    batch: int = 0  # batches of `epoch` done
    step: int = 0
    tokens: int = 0
    seconds: float = 0.0
    epoch_loss: float = 0.0  # summed over the epoch's masked tokens
    epoch_masked: int = 0
    epoch_tokens: int = 0
    epoch_seconds: float = 0.0
    history: list[dict] = field(default_factory=list)
    resumed: list[dict] = field(default_factory=list)

    @property
    def epoch_mean_loss(self) -> float:
        return self.epoch_loss / max(1, self.epoch_masked)

    @property
    def epoch_rate(self) -> float:
        """Tokens trained on per second in this epoch."""
        return self.epoch_tokens / max(self.epoch_seconds, 1e-9)

    def next_epoch(self) -> None:
        self.epoch, self.batch = self.epoch + 1, 0
        self.epoch_loss, self.epoch_masked, self.epoch_tokens, self.epoch_seconds = 0.0, 0, 0, 0.0


@dataclass
class _Run:
    """One adaptation's loaded parts: the model, its masker and data, the trainer, the state."""

    settings: AdaptSettings
    out: Path
    mode: str
    threads: int
    dtype: str
    tokenizer: object
    model: torch.nn.Module
    head_info: dict
    masker: _Masker
    corpus: Corpus
    pad_id: int
    head: object
    token_types: bool
    fingerprint: str
    trainer: Trainer
    total: int  # optimiser steps in the whole run
    state: TrainState = field(default_factory=TrainState)

    def held_out_scores(self) -> dict:
        return _score(
            self.model,
            self.corpus.held_out,
            self.masker,
            self.pad_id,
            self.settings.seed,
            self.head,
            self.token_types,
        )

    def checkpoint(self) -> None:
        save_atomic(
            {
                "fingerprint": self.fingerprint,
                "model": self.model.state_dict(),
                "trainer": self.trainer.state_dict(),
                "state": asdict(self.state),
            },
            self.out / CHECKPOINT,
        )
        crash_point("adapt.after_checkpoint")


def adapt(
    texts: list[str], provenance: dict, settings: AdaptSettings, progress: ProgressArg = False
) -> dict:
    """Continue masked-LM pretraining of `settings.base` on `texts` and save the result to
    `settings.out` (see the module). Resumes from `settings.out`'s checkpoint when one is
    there.

    Args:
        texts: the documents (`corpus.read_file_texts`, `corpus.read_store_texts`).
        provenance: where the texts came from (kept in the receipt).
    Returns:
        The receipt, as saved to `OUT/adapt-receipt.json`.
    Raises:
        InputError: bad `--out`, no text, or a checkpoint of another run.
        ModelError: the base cannot be loaded as a masked LM or has no mask token.
    """
    out = Path(settings.out)
    state_kind = check_out(out)
    run = _prepare(texts, provenance, settings, out, as_mode(progress))
    if state_kind == "resume":
        _resume(run)
    else:
        out.mkdir(parents=True, exist_ok=True)
        before = run.held_out_scores()
        run.state.history.append(
            {
                "epoch": 0,
                "steps": 0,
                "tokens": 0,
                "held_out_loss": before["loss"],
                "held_out_accuracy": before["accuracy"],
            }
        )
        write_line(
            f"before training: held-out loss {before['loss']}, masked-token accuracy "
            f"{before['accuracy']} ({run.head_info['head']} head)",
            run.mode,
        )
    stop = _train(run)
    receipt = _receipt(run, stop)
    save_adapted(run.model, run.tokenizer, Path(settings.base), out, receipt)
    path = out / RECEIPT
    path.write_text(json.dumps(receipt, indent=2, ensure_ascii=False) + "\n")
    fsync_file(path)
    (out / CHECKPOINT).unlink(missing_ok=True)
    return receipt


def _prepare(
    texts: list[str], provenance: dict, settings: AdaptSettings, out: Path, mode: str
) -> _Run:
    """Load the tokenizer and masked LM, build the corpus and the trainer for the run."""
    from transformers import AutoTokenizer

    threads = set_threads(settings.threads)
    dtype = resolve_dtype(settings.dtype)
    where = str(settings.base)
    try:
        tokenizer = AutoTokenizer.from_pretrained(settings.base)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the tokenizer of {where}: {exc}") from None
    model, head_info = load_mlm(Path(settings.base), settings.seed)
    check_length(settings.max_length, usable_length(model, tokenizer), "--max-length", where)
    specials = special_tokens(tokenizer, where)
    masker = _Masker(tokenizer, settings.rule, where)
    corpus = build_corpus(
        texts,
        provenance,
        tokenizer,
        settings.max_length,
        specials,
        settings.held_out,
        settings.seed,
        mode,
    )
    steps_per_epoch = -(-len(corpus.train.lengths) // settings.batch_size)
    total = steps_per_epoch * settings.epochs
    if settings.max_tokens:
        per_step = corpus.train.tokens() / steps_per_epoch
        total = min(total, max(1, math.ceil(settings.max_tokens / per_step)))
    params = [p for p in model.parameters() if p.requires_grad]
    trainer = Trainer(
        params, settings.lr, Schedule(int(settings.warmup_ratio * total), total), dtype
    )
    return _Run(
        settings,
        out,
        mode,
        threads,
        dtype,
        tokenizer,
        model,
        head_info,
        masker,
        corpus,
        specials.pad_id,
        head_logits(model),
        takes_token_types(model.base_model),
        settings.fingerprint(corpus),
        trainer,
        total,
    )


def _resume(run: _Run) -> None:
    """Load the checkpoint of an interrupted run with the same settings and data."""
    saved = torch.load(run.out / CHECKPOINT, weights_only=False)
    if saved.get("fingerprint") != run.fingerprint or "state" not in saved:
        raise InputError(
            f"--out {run.out}: its checkpoint is of another run (other settings "
            "or data); give the same options and data to resume, or a new --out"
        )
    run.model.load_state_dict(saved["model"])
    run.trainer.load_state_dict(saved["trainer"])
    run.state = TrainState(**saved["state"])
    run.state.resumed.append({"at_step": run.state.step, "tokens": run.state.tokens})
    write_line(
        f"resuming {run.out} at step {run.state.step:,}/{run.total:,} "
        f"({run.state.tokens:,} tokens trained on)",
        run.mode,
    )


def _train(run: _Run) -> str:
    """Epochs of steps until the horizon, a checkpoint when due and at each epoch's end.

    Returns:
        Why it stopped: "epochs" (every pass done) or "max_tokens" (the horizon came first).
    """
    settings, state = run.settings, run.state
    last_checkpoint = time.monotonic()
    bar = Progress(run.total, "adapt", "step", run.mode, every_s=60.0, leave=True)
    bar.update(state.step)
    stop = "epochs"
    while state.epoch <= settings.epochs and state.step < run.total:
        rng = np.random.default_rng([settings.seed, state.epoch])
        batches = training_batches(run.corpus.train.lengths, settings.batch_size, rng)
        run.model.train()
        for index in batches[state.batch :]:
            _step(run, index)
            bar.set_postfix(f"loss {state.epoch_mean_loss:.4f}, {state.epoch_rate:,.0f} tokens/s")
            bar.update()
            if state.step >= run.total:
                if state.batch < len(batches):
                    stop = "max_tokens"
                break
            due = (
                settings.checkpoint_steps and state.step % settings.checkpoint_steps == 0
            ) or time.monotonic() - last_checkpoint >= settings.checkpoint_seconds
            if due:
                run.checkpoint()
                last_checkpoint = time.monotonic()
        _end_epoch(run, len(batches))
        run.checkpoint()
        last_checkpoint = time.monotonic()
    bar.close()
    return stop


def _step(run: _Run, index) -> None:
    """One optimiser step on the batch `index`, its masks and dropout drawn from the step."""
    state = run.state
    started = time.perf_counter()
    step_seed = _step_seed(run.settings.seed, state.step + 1)
    torch.manual_seed(step_seed)  # dropout
    batch = run.masker.batch(
        run.corpus.train, index, run.pad_id, torch.Generator().manual_seed(step_seed)
    )
    with run.trainer.autocast():
        loss, _, n = mlm_loss(run.model, batch, run.head, run.token_types)
    value = run.trainer.step(loss, f"adapt step {state.step + 1}")
    real = int(batch["attention_mask"].sum())
    seconds = time.perf_counter() - started
    state.batch += 1
    state.step += 1
    state.tokens += real
    state.seconds += seconds
    state.epoch_loss += value * n
    state.epoch_masked += n
    state.epoch_tokens += real
    state.epoch_seconds += seconds


def _end_epoch(run: _Run, n_batches: int) -> None:
    """Score the held-out slice, record the epoch (or the part of it the horizon allowed)."""
    state = run.state
    scores = run.held_out_scores()
    entry = {
        "epoch": state.epoch,
        "steps": state.step,
        "tokens": state.tokens,
        "fraction_of_epoch": round(state.batch / n_batches, 4),
        "train_loss": round(state.epoch_mean_loss, 6),
        "held_out_loss": scores["loss"],
        "held_out_accuracy": scores["accuracy"],
        "train_seconds": round(state.epoch_seconds, 2),
        "tokens_per_second": round(state.epoch_rate, 1),
    }
    state.history.append(entry)
    write_line(
        f"epoch {state.epoch}/{run.settings.epochs}: train loss {entry['train_loss']:.4f}, "
        f"held-out loss {scores['loss']}, masked-token accuracy {scores['accuracy']}, "
        f"{entry['tokens_per_second']:,.0f} tokens/s, elapsed {clock(state.seconds)}",
        run.mode,
    )
    state.next_epoch()


def _receipt(run: _Run, stop: str) -> dict:
    from indexer.core.machine import cpu_model

    settings, state = run.settings, run.state
    return {
        "kind": "masked-lm adaptation",
        "base": str(settings.base),
        "head": run.head_info,
        "masking": settings.rule.describe(),
        "data": run.corpus.provenance,
        "settings": {
            "epochs": settings.epochs,
            "max_tokens": settings.max_tokens,
            "max_length": settings.max_length,
            "batch_size": settings.batch_size,
            "lr": settings.lr,
            "weight_decay": WEIGHT_DECAY,
            "grad_clip": GRAD_CLIP,
            "warmup_ratio": settings.warmup_ratio,
            "schedule": run.trainer.schedule.describe(),
            "seed": settings.seed,
            "dtype": run.dtype,
            "held_out": settings.held_out,
        },
        "stopped": stop,
        "steps": state.step,
        "tokens_seen": state.tokens,
        "train_seconds": round(state.seconds, 2),
        "tokens_per_second": round(state.tokens / max(state.seconds, 1e-9), 1),
        "history": state.history,
        "resumed": state.resumed,
        "machine": {"cpu": cpu_model(), "threads": run.threads},
    }
