"""The bi-encoder side of a regression pair head's blend, fine-tuned on the same train pairs
(`train pair --blend tuned`): a copy of the base encoder trained so that the cosine of the two
texts' mean-pooled vectors matches the score scaled to 0..1 (mean squared error, the
sentence-transformers `CosineSimilarityLoss` recipe), saved inside the head directory
(`BI_ENCODER_DIR`), where the blend reads it (`heads.pair.blend`).

Same optimiser as the heads (`indexer.training.Trainer`: AdamW, weight decay 0.01, clip 1.0,
bf16 autocast where the CPU has it), 10 % linear warm-up then linear decay, fixed seed. Texts are
read whole up to the base's positions (a sentence pair set; a longer text is cut, as the baseline
cuts it). No epoch is picked by validation: the blend's weight is (`choose_weight`). Does not train
the cross-encoder (`heads.train`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

BI_ENCODER_DIR = "bi-encoder"  # inside the head directory
BI_EPOCHS = 4  # sentence-transformers' STS-B bi-encoder example
BI_LR = 2e-5
BI_BATCH = 16
BI_MAX_LENGTH = 128  # per text; STS-B sentences are under 80 tokens


def _mean(model, batch: dict) -> torch.Tensor:
    from indexer.encode.pooling import mean_pool

    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return mean_pool(out.last_hidden_state, batch["attention_mask"])


def tune_bi_encoder(
    base: Path,
    firsts: Sequence[str],
    seconds: Sequence[str],
    targets: Sequence[float],
    out: Path,
    seed: int = 42,
    bf16: bool = False,
    epochs: int = BI_EPOCHS,
) -> dict:
    """Fine-tune a copy of `base` on (first, second, target in 0..1) and save it to `out`.

    Returns:
        {"epochs", "lr", "batch_size", "loss" per epoch, "seconds"} for the receipt.
    """
    from transformers import AutoModel, AutoTokenizer

    from indexer.encode.model_facts import load_transformer
    from indexer.heads.schedule import WARMUP_RATIO
    from indexer.training.schedule import plan_schedule
    from indexer.training.trainer import Trainer

    started = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model, _ = load_transformer(base, AutoModel)
    model.train()
    y = torch.tensor(np.asarray(targets, dtype=np.float32))
    steps = -(-len(firsts) // BI_BATCH)
    trainer = Trainer(
        model.parameters(),
        BI_LR,
        plan_schedule(steps, epochs, WARMUP_RATIO),
        "bf16" if bf16 else "fp32",
    )
    losses = []
    for epoch in range(1, epochs + 1):
        order, total = rng.permutation(len(firsts)), 0.0
        for start in range(0, len(order), BI_BATCH):
            index = order[start : start + BI_BATCH]
            batches = [
                tokenizer(
                    [texts[i] for i in index],
                    padding=True,
                    truncation=True,
                    max_length=BI_MAX_LENGTH,
                    return_tensors="pt",
                )
                for texts in (firsts, seconds)
            ]
            with trainer.autocast():
                a, b = (_mean(model, batch) for batch in batches)
            cosine = torch.nn.functional.cosine_similarity(a.float(), b.float())
            loss = torch.nn.functional.mse_loss(cosine, y[index])
            total += trainer.step(loss, f"bi-encoder epoch {epoch}") * len(index)
        losses.append(round(total / len(order), 6))
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "epochs": epochs,
        "lr": BI_LR,
        "batch_size": BI_BATCH,
        "max_length": BI_MAX_LENGTH,
        "loss": losses,
        "seconds": round(time.perf_counter() - started, 1),
        "rule": "cosine of mean-pooled vectors vs the score scaled to 0..1, MSE "
        "(sentence-transformers CosineSimilarityLoss)",
    }
