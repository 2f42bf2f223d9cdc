"""The enumerations written once as `Literal` types, for every layer and the CLI: pooling
modes, dtypes and devices; a head's pooling, dtype and decoding; review strategies. Other
modules derive their tuples with `typing.get_args`, and the CLI its choices.

Holds names only; what a mode or dtype does lives with the code that runs it
(`indexer.encode.pooling`, `indexer.encode.policy`). Imports nothing of bertindex.
"""

from __future__ import annotations

from typing import Literal

# `model.pooling`: how token states become one vector (indexer.encode.pooling)
PoolingMode = Literal["mean", "cls", "pooler", "last4"]

# what an encoder runs in, and what a provenance record names (`Provenance.dtype`)
Dtype = Literal["fp32", "bf16", "fp16", "int8"]

# `model.dtype`: a dtype, or `auto` (indexer.encode.policy.choose_path decides)
DtypeChoice = Literal["auto", Dtype]

# `model.device`: `auto` is CUDA when torch sees it, else the CPU
DeviceChoice = Literal["auto", "cpu", "cuda"]

# `train --pooling`: what a sentence head pools (`auto`: the base model's own pooling)
HeadPooling = Literal["auto", "cls", "mean"]

# `train --dtype`: what a head trains in
HeadDtype = Literal["fp32", "bf16"]

# a tagger's decoding of word tags into spans (indexer.heads.tagger.head_type)
Decode = Literal["bio", "argmax"]

# `review export --strategy`: which documents a person labels first (indexer.review.strategies)
ReviewStrategy = Literal["uncertain", "margin", "disagree", "random"]

# `token create --scope`: what a token may do on `bertindex serve` (what each reaches:
# indexer.store.tokens.GRANTS; checked by search.access)
TokenScope = Literal["read", "review", "metrics", "admin"]

# how a tagger cuts raw text into its training words (indexer.heads.tagger.segment)
Segmentation = Literal["whitespace", "tokenizer"]

# `keyword.language`: the BM25 analyzer's stemmer (indexer.index.keyword); `none`: no stemming
KeywordLanguage = Literal[
    "english", "italian", "german", "french", "spanish", "portuguese", "dutch", "none"
]

# `eval head --input`: a tagger's split as its pre-split words, or joined by spaces as raw text
EvalInput = Literal["words", "raw-text"]
