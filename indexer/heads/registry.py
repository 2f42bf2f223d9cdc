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

_TYPES = {  # name -> "module:class"
    "classifier": "indexer.heads.classifier.head_type:SequenceClassifier",
    "ner": "indexer.heads.tagger.head_type:TokenTagger",
    "pair": "indexer.heads.pair.head_type:PairHead",
}
HEAD_TYPE_KEY = "bertindex_head_type"  # config.json: the type that trained it (older heads: none)
HEAD_TYPE_NAMES = tuple(_TYPES)


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


