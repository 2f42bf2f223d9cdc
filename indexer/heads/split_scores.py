"""After training: a head scored on its splits (full metrics), the head type's blend (a pair
head with a bi-encoder's cosine), and a tagger's test split scored as raw text through
`predict` (the entities `annotate` stores). `heads.train` calls these once `fit` is done."""

from __future__ import annotations

from pathlib import Path

from indexer.errors import InputError, ModelError
from indexer.heads.base import examples_of
from indexer.heads.data import HeadData
from indexer.heads.features import Encoded
from indexer.heads.inference import model_logits, pad_id_of, score_logits
from indexer.heads.registry import head_type
from indexer.heads.settings import TrainSettings


def score_split(
    model,
    tokenizer,
    data: HeadData,
    encoded: dict[str, Encoded],
    split: str,
    batch_size: int = 64,
    logits: list | None = None,
    options: dict | None = None,
) -> dict:
    """Score the current model on one split (full metrics; `logits`: already computed;
    `options`: the head type's `score` options, e.g. a blend's cosines)."""
    kind = head_type(data.task)
    if logits is None:
        logits = model_logits(kind, model, encoded[split], pad_id_of(tokenizer), batch_size)
    return score_logits(
        kind, logits, data.splits[split], encoded[split], data.label_names, **(options or {})
    )


def blend_head(
    model,
    tokenizer,
    data: HeadData,
    encoded: dict[str, Encoded],
    settings: TrainSettings,
    scratch: Path,
    batch_size: int = 64,
) -> tuple[dict | None, dict, dict[str, Path]]:
    """The head type's blend after training (`HeadType.blend`; a regression pair head with a
    bi-encoder: the base, or with `settings.blend` "tuned" one fine-tuned here on the train
    pairs, in `scratch`), unless `settings.blend` is "off".

    Returns:
        (the receipt's `blend` record or None, split -> logits of validation and test, folders
        to save inside the head: name -> directory).
    """
    from indexer.config import DEFAULT_MODEL, resolve_model_path

    kind = settings.kind
    logits = {
        split: model_logits(kind, model, encoded[split], pad_id_of(tokenizer), batch_size)
        for split in ("validation", "test")
        if split in data.splits
    }
    if settings.blend == "off":
        return None, logits, {}
    folders: dict[str, Path] = {}
    tuned = None
    if settings.blend == "tuned" and kind.blend_tunes(model):
        from indexer.heads.pair.bi_encoder import BI_ENCODER_DIR, tune_bi_encoder
        from indexer.heads.pair.head_type import PairExample, gold_scores, score_range

        low, high = score_range(model.config)
        train = examples_of(
            PairExample, data.splits["train"], "--blend tuned tunes a bi-encoder on pair items"
        )
        folder = scratch / BI_ENCODER_DIR
        tuned = tune_bi_encoder(
            settings.base,
            [e.text_a for e in train],
            [e.text_b for e in train],
            [(s - low) / (high - low) for s in gold_scores(train)],
            folder,
            seed=settings.seed,
            bf16=settings.dtype == "bf16",
        )
        folders[BI_ENCODER_DIR] = folder
        encoder, name = folder, BI_ENCODER_DIR
    else:
        try:
            packaged = resolve_model_path(DEFAULT_MODEL) == Path(settings.base).resolve()
        except ModelError:
            packaged = False
        encoder = Path(settings.base)
        name = DEFAULT_MODEL if packaged else str(Path(settings.base).resolve())
    record = kind.blend(model, data.splits, logits, data.label_names, encoder, name)
    if record is not None and tuned is not None:
        record["bi_encoder"] = tuned
    if record is None or not record.get("weight"):
        folders = {}  # the head alone: nothing to keep
    return record, logits, folders


def raw_text_split(model, tokenizer, data: HeadData, kind, where: str) -> dict | None:
    """A tagger's test split (else validation) scored as raw text through `predict`, which
    gives the entities `annotate` stores (`indexer.heads.tagger.raw_text`): the receipt's
    `raw_text`. None for other head types; {"skipped": why} when a text is too long."""
    from indexer.heads.predict import Predictor
    from indexer.heads.tagger.raw_text import RAW_TEXT_NOTE, score_raw_text

    if not kind.capabilities.scores_spans:
        return None
    split = "test" if "test" in data.splits else "validation"
    predictor = Predictor(kind, model.eval(), tokenizer, where)
    try:
        scores = score_raw_text(data.splits[split], data.label_names, predictor.predict)
    except InputError as exc:  # a joined text longer than the model's positions
        return {"split": split, "skipped": str(exc)}
    return {"split": split, "note": RAW_TEXT_NOTE, **predictor.options, **scores}
