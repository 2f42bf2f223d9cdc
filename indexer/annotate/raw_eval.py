"""`eval head --input raw-text`: a tagger scored on its split's words joined by spaces, run
through the annotate path (`Annotator`, the settings `bertindex annotate` runs with), so the
figure is the one the entities annotate stores would score. Does not touch a store.
"""

from __future__ import annotations

from pathlib import Path

from indexer.annotate.annotator import Annotator, load_heads
from indexer.config import Config
from indexer.errors import InputError
from indexer.heads.data import HeadData
from indexer.heads.registry import capabilities
from indexer.heads.tagger.raw_text import RAW_TEXT_NOTE, score_raw_text


def evaluate_raw_text(
    model_dir: str | Path, data: HeadData, config: Config, split: str = "test"
) -> dict:
    """Score the tagger in `model_dir` on `data.splits[split]` as raw text.

    Args:
        model_dir: a saved NER head.
        data: labelled splits read for `ner`.
        config: the configuration annotate would run with (dtype, device, windows).
        split: the split to score.
    Returns:
        {"split", "examples", "metric", "input": "raw-text", "segmentation", "entity_f1", ...}.
    """
    if not capabilities(data.task).scores_spans:
        raise InputError(
            f"--input raw-text scores NER heads; the data were read for "
            f"'{data.task}' (score a classifier with --input words)"
        )
    if split not in data.splits:
        raise InputError(f"no '{split}' split in the data; have {', '.join(data.splits)}")
    heads = load_heads([str(model_dir)])
    head = heads[0]
    if not head.kind.capabilities.scores_spans:
        raise InputError(
            f"{model_dir} is a {head.kind.name} head; --input raw-text is for NER heads"
        )
    annotator = Annotator.for_config(heads, config)

    def run(texts: list[str]):
        return [a.entities for a in annotator.annotate(texts)]

    scores = score_raw_text(data.splits[split], data.label_names, run)
    return {
        "split": split,
        "metric": head.kind.metric,
        "note": RAW_TEXT_NOTE,
        "segmentation": head.options.get("segmentation"),
        **scores,
    }
