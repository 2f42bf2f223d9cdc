"""The head types by name: the one place a new head type is registered (one line in `_TYPES`).

Types are imported on first use, so that naming them (the CLI's `train` commands) does not
load torch. Also finds the type of a saved head (config.json `architectures`).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from indexer.errors import InputError, ModelError

if TYPE_CHECKING:
    from indexer.heads.types.base import HeadType

_TYPES = {  # name -> "module:class"
    "classifier": "indexer.heads.types.classifier:SequenceClassifier",
    "ner": "indexer.heads.types.tagger:TokenTagger",
    "pair": "indexer.heads.types.pair:PairHead",
}
HEAD_TYPE_KEY = "bertindex_head_type"  # config.json: the type that trained it (older heads: none)
HEAD_TYPE_NAMES = tuple(_TYPES)


@cache
def head_type(name: str) -> HeadType:
    """The head type called `name` (`bertindex train NAME`, a receipt's `task`)."""
    if name not in _TYPES:
        raise InputError(f"unknown head type '{name}'; choose one of {', '.join(_TYPES)}")
    module, cls = _TYPES[name].split(":")
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


