"""Helpers for the tiny heads the fixtures in tests/conftest.py train or save (`heads`,
`toy_head`): the tagger's labels, a head saved beside its tokenizer, the toy pair rule, and the
command-line form of the heads."""

from __future__ import annotations

import json
import random
from pathlib import Path

NER_LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
FILLER = ["sofa", "apple", "pear", "river", "sea", "city"]


def save_head(model, model_dir: Path, out: Path) -> Path:
    from transformers import AutoTokenizer

    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    return out


def head_args(heads) -> list[str]:
    """The `heads` fixture as `annotate` arguments: `clf=DIR`, `ner=DIR`."""
    return [f"clf={heads['clf']}", f"ner={heads['ner']}"]


def toy_pairs(n: int, seed: int) -> list[dict]:
    """Score 1 for (cat, mat) and (dog, rug), 0 for (cat, rug) and (dog, mat), each text padded
    with a filler word: an XOR, so neither text alone tells."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.choice(["cat", "dog"]), rng.choice(["mat", "rug"])
        rows.append(
            {
                "id": f"p{i}",
                "text_a": f"{a} {rng.choice(FILLER)}",
                "text_b": f"{rng.choice(FILLER)} {b}",
                "score": 1.0 if (a, b) in (("cat", "mat"), ("dog", "rug")) else 0.0,
            }
        )
    return rows


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)
