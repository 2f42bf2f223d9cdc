"""The toy corpus and settings of the `adapt` tests, importable by the subprocess a resume test
kills (it runs with tests/support on its PYTHONPATH)."""

from __future__ import annotations

from pathlib import Path

TOY = [
    "the cat sat on the mat",
    "the dog sat on the rug",
    "the cat slept on the sofa",
    "the dog slept on the mat",
    "red apple blue river",
    "green pear big city",
]


def toy_texts(n: int = 120) -> list[str]:
    return [TOY[i % len(TOY)] for i in range(n)]


def settings(model_dir: Path, out: Path, **kw):
    from indexer.adapt.run import AdaptSettings

    base = dict(
        base=model_dir,
        out=out,
        epochs=6,
        max_length=16,
        batch_size=8,
        lr=1e-2,
        seed=0,
        held_out=0.25,
        dtype="fp32",
        threads=1,
    )
    return AdaptSettings(**(base | kw))
