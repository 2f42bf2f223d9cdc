"""The head types by name and what each can do: the one place a new head type is registered
(one line in `_TYPES`), and the one place that knows which type does what (`Capabilities`).

Code outside asks a type's capabilities (`capabilities(name)`, or `kind.capabilities`), never
compares its name. Types are imported on first use, so that naming them or reading their
capabilities (the CLI's `train` commands and options) does not load torch. Also finds the
type of a saved head (config.json `architectures`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from indexer.errors import InputError, ModelError

if TYPE_CHECKING:
    from indexer.heads.base import HeadType


@dataclass(frozen=True)
class Capabilities:
    """What a head type does beyond the `HeadType` interface every type implements; the jobs
    that only some types serve ask these.

    Args:
        scores_spans: its results are entity spans over the text (a tagger): `eval head
            --input raw-text` and a training receipt's `raw_text` score it on joined words.
        scores_texts: it gives each text a score per label (a classifier,
            `HeadType.text_logits`): `serve`'s `POST /predict` answers with them.
        scores_pairs: it scores pairs of texts, never single ones (a cross-encoder):
            `PairScorer` and search reranking load it; `annotate` and `predict` refuse it.
        reviewable: people's labels of its results can be imported (`review import`) and
            added to its train split (`train --reviewed`): one label per document.
        blends: a regression head of it can be mixed with a bi-encoder's cosine after
            training (`train --blend`).
    """

    scores_spans: bool = False
    scores_texts: bool = False
    scores_pairs: bool = False
    reviewable: bool = False
    blends: bool = False


_TYPES = {  # name -> ("module:class", what it can do)
    "classifier": (
        "indexer.heads.classifier.head_type:SequenceClassifier",
        Capabilities(scores_texts=True, reviewable=True),
    ),
    "ner": ("indexer.heads.tagger.head_type:TokenTagger", Capabilities(scores_spans=True)),
    "pair": ("indexer.heads.pair.head_type:PairHead", Capabilities(scores_pairs=True, blends=True)),
}
HEAD_TYPE_KEY = "bertindex_head_type"  # config.json: the type that trained it (older heads: none)
HEAD_TYPE_NAMES = tuple(_TYPES)


def _known(name: str) -> None:
    if name not in _TYPES:
        raise InputError(f"unknown head type '{name}'; choose one of {', '.join(_TYPES)}")


def capabilities(name: str) -> Capabilities:
    """What the head type called `name` can do, without loading it (no torch)."""
    _known(name)
    return _TYPES[name][1]


@cache
def head_type(name: str) -> HeadType:
    """The head type called `name` (`bertindex train NAME`, a receipt's `task`)."""
    _known(name)
    module, cls = _TYPES[name][0].split(":")
    return getattr(importlib.import_module(module), cls)()


def head_types() -> list[HeadType]:
    """Every registered head type, in registration order."""
    return [head_type(name) for name in _TYPES]


def head_type_of(config) -> HeadType:
    """The head type of a model config: its `bertindex_head_type`, else (heads saved before
    the key) the first type whose architecture its `architectures` end with."""
    named = getattr(config, HEAD_TYPE_KEY, None)
    if named in _TYPES:
        return head_type(named)
    archs = getattr(config, "architectures", None) or []
    for arch in archs:
        for kind in head_types():
            if arch.endswith(kind.architecture):
                return kind
    raise ModelError(
        f"config architectures {archs or None} are none of the head types' "
        f"({', '.join('...' + k.architecture for k in head_types())})"
    )
