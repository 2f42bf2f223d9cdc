"""An NER head's receipt figure against the entities annotate delivers on raw text, before and
after raw text is segmented as the head's training words were (issue 26, part 2).

Trains a small head (head-only on the packaged all-MiniLM-L6-v2, `--train-size` CoNLL-2003
sentences drawn by `--seed`, `--val-size` validation sentences, the full test split unless
`--test-size`) through the library's one training path, then scores the test split four ways:

- `receipt_words`: the receipt's test entity-F1 (pre-split words, what training scores);
- `receipt_raw_text`: the receipt's new `raw_text` figure (joined words through `predict`);
- `annotate_before`: the joined words through the annotate path with the tokenizer's own
  pre-tokenizer words (`segmentation: tokenizer`, what annotate did before);
- `annotate_after`: the same with the head's recorded `whitespace` segmentation
  (`bertindex eval head --input raw-text`).

Writes the figures, the CPU, the load and the command to `--out`.
Usage: python benchmarks/ner_raw_text.py [--train-size 2000] [--val-size 500] [--epochs 4]
       [--seed 0] [--test-size N] [--out benchmarks/results/ner_raw_text.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import cpu_name, machine, missing, write_json

from indexer.annotate.annotator import Annotator, load_heads
from indexer.annotate.raw_eval import evaluate_raw_text
from indexer.config import DEFAULT_MODEL, Config, resolve_model_path
from indexer.heads.data import HeadData, read_head_data
from indexer.heads.tagger.raw_text import score_raw_text
from indexer.heads.train import TrainSettings, train_head

ROOT = Path(__file__).resolve().parents[1]
CONLL = ROOT.parent / "shared" / "data" / "conll2003"


def _sample(examples: list, size: int | None, seed: int) -> list:
    if size is None or size >= len(examples):
        return list(examples)
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size, replace=False))
    return [examples[i] for i in keep]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--val-size", type=int, default=500)
    parser.add_argument("--test-size", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/ner_raw_text.json")
    args = parser.parse_args()
    if missing(CONLL / "eng.train", "conll2003"):
        return 1
    started, load_before = time.time(), os.getloadavg()
    full = read_head_data("ner", CONLL / "eng.train", CONLL / "eng.testa", CONLL / "eng.testb")
    splits = {
        "train": _sample(full.splits["train"], args.train_size, args.seed),
        "validation": _sample(full.splits["validation"], args.val_size, args.seed),
        "test": _sample(full.splits["test"], args.test_size, args.seed),
    }
    data = HeadData(full.task, full.label_names, splits, dict(full.sources))
    config = Config()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "head"
        settings = TrainSettings(
            "ner",
            resolve_model_path(DEFAULT_MODEL),
            out,
            head_only=True,
            epochs=args.epochs,
            seed=args.seed,
        )
        receipt = train_head(data, settings)
        after = evaluate_raw_text(out, data, config)
        heads = load_heads([str(out)])
        heads[0].options = {"segmentation": "tokenizer"}  # the tokenizer's words, as before
        annotator = Annotator.for_config(heads, config)
        before = score_raw_text(
            data.splits["test"],
            data.label_names,
            lambda texts: [a.entities for a in annotator.annotate(texts)],
        )
    figures = {
        "receipt_words": receipt["test"]["entity_f1"],
        "receipt_raw_text": receipt["raw_text"]["entity_f1"],
        "annotate_before": before["entity_f1"],
        "annotate_after": after["entity_f1"],
    }
    result = {
        "figures": {k: round(v, 4) for k, v in figures.items()},
        "test_sentences": len(data.splits["test"]),
        "train_sentences": len(splits["train"]),
        "validation_sentences": len(splits["validation"]),
        "epochs": args.epochs,
        "head_only": True,
        "annotate_dtype": annotator.dtype_name,
        "gold_entities": after["gold_entities"],
        "predicted_entities": {
            "before": before["predicted_entities"],
            "after": after["predicted_entities"],
        },
        "minutes": round((time.time() - started) / 60, 2),
        "cpu": cpu_name(),
        "load_average_before": [round(x, 2) for x in load_before],
        "machine": machine(),
        "command": "python " + " ".join(sys.argv),
    }
    print(result["figures"], f"({result['minutes']} min, {result['cpu']})")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
