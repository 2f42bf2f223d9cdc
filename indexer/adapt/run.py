"""One `bertindex adapt` run: continued masked-LM pretraining of an encoder, resumable.

AdamW (weight decay 0.01) with linear warm-up over `WARMUP_RATIO` of the steps, then linear
decay to 0 at the run's horizon (the smaller of `epochs` passes and `max_tokens` tokens),
gradient-norm clip 1.0, bf16 autocast where the CPU has native bf16 (weights, optimizer
state and scores fp32). Sequences are batched by similar length (`heads.features`). A
held-out slice is scored before training and after each epoch (and where `max_tokens` ends
the run) with the same masks every time, so its loss and masked-token accuracy compare
across epochs.

Resuming: every `checkpoint_seconds` (and `checkpoint_steps`, and at each epoch's end) the
whole state (weights, optimizer, schedule, position, history) is written atomically to
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
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from indexer.adapt.corpus import Corpus, Sequences, build_corpus
from indexer.adapt.masking import MaskRule, mask_tokens
from indexer.adapt.mlm import head_logits, load_mlm, mlm_loss, save_adapted
from indexer.encode.model_facts import (
    check_length,
    special_tokens,
    takes_token_types,
    usable_length,
)
from indexer.encode.policy import resolve_dtype
from indexer.errors import InputError, ModelError
from indexer.faults import crash_point
from indexer.fsio import fsync_file
from indexer.heads.features import training_batches
from indexer.heads.schedule import Schedule
from indexer.heads.settings import GRAD_CLIP, WEIGHT_DECAY
from indexer.machine import set_threads
from indexer.progress import Progress, ProgressArg, as_mode, clock, write_line

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
        keep = {k: str(v) for k, v in asdict(self).items()
                if k not in ("out", "threads", "checkpoint_seconds", "checkpoint_steps")}
        keep["data"] = [corpus.provenance.get("documents"), corpus.provenance.get("tokens")]
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def check_out(out: Path) -> str:
    """"new", or "resume" (a checkpoint and no receipt).

    Raises:
        InputError: `out` holds a finished adaptation, or other files.
    """
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return "new"
    if not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory; give a new one")
    if (out / RECEIPT).is_file():
        raise InputError(f"--out {out}: holds a finished adaptation ({RECEIPT}); give a new "
                         "directory (or remove it to run again)")
    if (out / CHECKPOINT).is_file():
        return "resume"
    raise InputError(f"--out {out}: exists and holds neither an adaptation in progress "
                     f"({CHECKPOINT}) nor is empty; give a new or empty directory")


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
            raise ModelError(f"{where}: the tokenizer has no mask token; masked-LM "
                             "adaptation needs one ([MASK], <mask>)")
        self.mask_id = int(tokenizer.mask_token_id)
        specials = set(tokenizer.all_special_ids)
        self.random_ids = torch.tensor([i for i in range(len(tokenizer)) if i not in specials],
                                       dtype=torch.long)
        self.rule = rule

    def batch(self, seqs: Sequences, index, pad_id: int, generator: torch.Generator) -> dict:
        ids, mask, cand, words = _collate(seqs, index, pad_id, self.rule.whole_word)
        inputs, labels = mask_tokens(ids, cand, self.mask_id, self.random_ids, self.rule,
                                     generator, words)
        return {"input_ids": inputs, "attention_mask": mask, "labels": labels}


def _step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step) % (2**63 - 1)


def _score(model, seqs: Sequences, masker: _Masker, pad_id: int, seed: int, head,
           token_types: bool) -> dict:
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
    return {"loss": round(total / count, 6) if count else None,
            "accuracy": round(correct / count, 6) if count else None, "masked": count}


def _save_checkpoint(out: Path, state: dict) -> None:
    tmp = out / f".{CHECKPOINT}.tmp-{os.getpid()}"
    torch.save(state, tmp)
    fsync_file(tmp)
    os.replace(tmp, out / CHECKPOINT)


def adapt(texts: list[str], provenance: dict, settings: AdaptSettings,
          progress: ProgressArg = False) -> dict:
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
    from transformers import AutoTokenizer

    out = Path(settings.out)
    state_kind = check_out(out)
    mode = as_mode(progress)
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
    corpus = build_corpus(texts, provenance, tokenizer, settings.max_length, specials,
                          settings.held_out, settings.seed, mode)
    fingerprint = settings.fingerprint(corpus)
    head = head_logits(model)
    token_types = takes_token_types(model.base_model)

    lengths = corpus.train.lengths
    steps_per_epoch = -(-len(lengths) // settings.batch_size)
    total = steps_per_epoch * settings.epochs
    if settings.max_tokens:
        per_step = corpus.train.tokens() / steps_per_epoch
        total = min(total, max(1, math.ceil(settings.max_tokens / per_step)))
    schedule = Schedule(int(settings.warmup_ratio * total), total)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule.multiplier)

    pos = {"epoch": 1, "batch": 0, "step": 0, "tokens": 0, "seconds": 0.0,
           "epoch_loss": 0.0, "epoch_masked": 0, "epoch_tokens": 0, "epoch_seconds": 0.0}
    history: list[dict] = []
    resumed: list[dict] = []
    if state_kind == "resume":
        saved = torch.load(out / CHECKPOINT, weights_only=False)
        if saved["fingerprint"] != fingerprint:
            raise InputError(f"--out {out}: its checkpoint is of another run (other settings "
                             "or data); give the same options and data to resume, or a new "
                             "--out")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        pos, history, resumed = saved["position"], saved["history"], saved["resumed"]
        resumed.append({"at_step": pos["step"], "tokens": pos["tokens"]})
        write_line(f"resuming {out} at step {pos['step']:,}/{total:,} "
                   f"({pos['tokens']:,} tokens trained on)", mode)
    else:
        out.mkdir(parents=True, exist_ok=True)
        before = _score(model, corpus.held_out, masker, specials.pad_id, settings.seed, head,
                        token_types)
        history.append({"epoch": 0, "steps": 0, "tokens": 0,
                        "held_out_loss": before["loss"], "held_out_accuracy": before["accuracy"]})
        write_line(f"before training: held-out loss {before['loss']}, masked-token accuracy "
                   f"{before['accuracy']} ({head_info['head']} head)", mode)

    def checkpoint() -> None:
        _save_checkpoint(out, {"fingerprint": fingerprint, "model": model.state_dict(),
                               "optimizer": optimizer.state_dict(),
                               "scheduler": scheduler.state_dict(), "position": pos,
                               "history": history, "resumed": resumed})
        crash_point("adapt.after_checkpoint")

    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")
    last_checkpoint = time.monotonic()
    bar = Progress(total, "adapt", "step", mode, every_s=60.0, leave=True)
    bar.update(pos["step"])
    stop = "epochs"
    while pos["epoch"] <= settings.epochs and pos["step"] < total:
        rng = np.random.default_rng([settings.seed, pos["epoch"]])
        batches = training_batches(lengths, settings.batch_size, rng)
        model.train()
        for index in batches[pos["batch"]:]:
            t0 = time.perf_counter()
            step_seed = _step_seed(settings.seed, pos["step"] + 1)
            torch.manual_seed(step_seed)  # dropout
            batch = masker.batch(corpus.train, index, specials.pad_id,
                                 torch.Generator().manual_seed(step_seed))
            with autocast:
                loss, _, n = mlm_loss(model, batch, head, token_types)
            if not torch.isfinite(loss):
                raise ModelError(f"adapt step {pos['step'] + 1}: the loss became "
                                 f"{loss.item()}; lower --lr")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            real = int(batch["attention_mask"].sum())
            seconds = time.perf_counter() - t0
            pos["batch"] += 1
            pos["step"] += 1
            pos["tokens"] += real
            pos["seconds"] += seconds
            pos["epoch_loss"] += float(loss.detach()) * n
            pos["epoch_masked"] += n
            pos["epoch_tokens"] += real
            pos["epoch_seconds"] += seconds
            bar.set_postfix(f"loss {pos['epoch_loss'] / max(1, pos['epoch_masked']):.4f}, "
                            f"{pos['epoch_tokens'] / max(pos['epoch_seconds'], 1e-9):,.0f} tokens/s")
            bar.update()
            if pos["step"] >= total:
                if pos["batch"] < len(batches):
                    stop = "max_tokens"
                break
            due = (settings.checkpoint_steps and pos["step"] % settings.checkpoint_steps == 0) \
                or time.monotonic() - last_checkpoint >= settings.checkpoint_seconds
            if due:
                checkpoint()
                last_checkpoint = time.monotonic()
        scores = _score(model, corpus.held_out, masker, specials.pad_id, settings.seed, head,
                        token_types)
        entry = {"epoch": pos["epoch"], "steps": pos["step"], "tokens": pos["tokens"],
                 "fraction_of_epoch": round(pos["batch"] / len(batches), 4),
                 "train_loss": round(pos["epoch_loss"] / max(1, pos["epoch_masked"]), 6),
                 "held_out_loss": scores["loss"], "held_out_accuracy": scores["accuracy"],
                 "train_seconds": round(pos["epoch_seconds"], 2),
                 "tokens_per_second": round(pos["epoch_tokens"] / max(pos["epoch_seconds"], 1e-9), 1)}
        history.append(entry)
        write_line(f"epoch {pos['epoch']}/{settings.epochs}: train loss {entry['train_loss']:.4f}, "
                   f"held-out loss {scores['loss']}, masked-token accuracy {scores['accuracy']}, "
                   f"{entry['tokens_per_second']:,.0f} tokens/s, elapsed {clock(pos['seconds'])}",
                   mode)
        pos.update({"epoch": pos["epoch"] + 1, "batch": 0, "epoch_loss": 0.0, "epoch_masked": 0,
                    "epoch_tokens": 0, "epoch_seconds": 0.0})
        checkpoint()
        last_checkpoint = time.monotonic()
    bar.close()
    from indexer.machine import cpu_model

    receipt = {
        "kind": "masked-lm adaptation",
        "base": str(settings.base),
        "head": head_info,
        "masking": settings.rule.describe(),
        "data": corpus.provenance,
        "settings": {"epochs": settings.epochs, "max_tokens": settings.max_tokens,
                     "max_length": settings.max_length, "batch_size": settings.batch_size,
                     "lr": settings.lr, "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP,
                     "warmup_ratio": settings.warmup_ratio, "schedule": schedule.describe(),
                     "seed": settings.seed, "dtype": dtype, "held_out": settings.held_out},
        "stopped": stop,
        "steps": pos["step"],
        "tokens_seen": pos["tokens"],
        "train_seconds": round(pos["seconds"], 2),
        "tokens_per_second": round(pos["tokens"] / max(pos["seconds"], 1e-9), 1),
        "history": history,
        "resumed": resumed,
        "machine": {"cpu": cpu_model(), "threads": threads},
    }
    save_adapted(model, tokenizer, Path(settings.base), out, receipt)
    path = out / RECEIPT
    path.write_text(json.dumps(receipt, indent=2, ensure_ascii=False) + "\n")
    fsync_file(path)
    (out / CHECKPOINT).unlink(missing_ok=True)
    return receipt

