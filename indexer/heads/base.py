"""The head-type interface (`HeadType`) and the labelled example every type extends. The
results heads return (`Label`, `Entity`) are records below both heads and store
(`indexer.records.annotations`). Does not load models or read files.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

import numpy as np

from indexer.errors import InputError, ModelError
from indexer.heads.registry import Capabilities, capabilities
from indexer.records.annotations import Entity, Label

if TYPE_CHECKING:  # torch only in annotations: a search reading labels never imports it
    import torch

    from indexer.heads.features import Encoded


# ---- examples -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One labelled item of a split; each head type adds its input and label fields."""

    id: str


ExampleT = TypeVar("ExampleT", bound=Example)


def examples_of(
    example_type: type[ExampleT], examples: Sequence[Example], refusal: str
) -> list[ExampleT]:
    """`examples` as one head type's examples: a split read for that type holds no other, and
    a split of another type's items is refused with `refusal`.

    Raises:
        InputError: `refusal`, when an example is not an `example_type`.
    """
    typed = [e for e in examples if isinstance(e, example_type)]
    if len(typed) != len(examples):
        raise InputError(refusal)
    return typed


def label_index(value: object, names: Sequence[str], where: str) -> int:
    """A label given by name or index -> its index in `names`.

    Raises:
        InputError: naming `where`, the value and the valid labels.
    """
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if 0 <= value < len(names):
            return value
        raise InputError(f"{where}: label {value} is outside 0..{len(names) - 1}")
    elif isinstance(value, str):
        try:
            return list(names).index(value)
        except ValueError:
            pass
        raise InputError(f"{where}: label {value!r} is not one of {list(names)}")
    raise InputError(f"{where}: label {value!r} must be a name or an index")


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 of (..., labels) logits."""
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    return x / x.sum(axis=-1, keepdims=True)


# ---- the interface ------------------------------------------------------------------------


class HeadType(ABC, Generic[ExampleT]):
    """What one kind of head is, to every job that handles heads.

    data (`heads.data`): `example_type`, `formats`, `item_labels`, `label_names_from`,
    `check_label_names`, `example`; model: `model_class`, `architecture`, `check_model`,
    `pooling`; features and training (`heads.train`): `encode`, `loss`, `head_modules`,
    `backbone_features`, `feature_logits`, `feature_targets`; eval (`heads.inference`,
    `heads.evaluate`): `logits`, `example_logits`, `metric`, `score`, `receipt_fields`,
    `baseline`; predict and annotate: `result_type`, `predict`, `top`, `window_output`,
    `annotate`, `text_logits`. The rows a result becomes are its `result_type`'s (`Label`,
    `Entity`). What only some types do is in `capabilities` (`heads.registry.Capabilities`).
    A type is generic in its example class (`ExampleT`), the one its `example` returns.
    """

    name: ClassVar[str]  # `bertindex train NAME`, the receipt's `task`
    summary: ClassVar[str]  # help of `bertindex train NAME`
    metric: ClassVar[str]  # the key of `score` that picks the best epoch
    architecture: ClassVar[str]  # config.json `architectures` end with this
    splittable: ClassVar[tuple[str, ...]]  # architectures whose top `top` can split off
    example_type: ClassVar[type[Example]]
    result_type: ClassVar[type[Label | Entity]]
    formats: ClassVar[tuple[str, ...]]  # labelled formats holding its items (`ingest.formats`)
    label_key: ClassVar[str]  # the labelled item's key
    default_batch_size: ClassVar[int]  # examples per training step
    decodes: ClassVar[tuple[str, ...]] = ()  # `decode` choices of score/predict, default first
    decode_note: ClassVar[str | None] = None  # receipt `recipe.ner_decode`
    head_only: ClassVar[bool] = True  # can train on frozen features (`--head-only`)

    @property
    def capabilities(self) -> Capabilities:
        """What this type can do beyond the interface, as registered with its name."""
        return capabilities(self.name)

    # -- data -------------------------------------------------------------------------------
    @abstractmethod
    def item_labels(self, item: dict, where: str) -> list:
        """The raw labels (names or indexes) of one item, to infer the label list."""

    @abstractmethod
    def label_names_from(self, seen: set) -> list[str]:
        """The label list from the labels seen in every split (all str or all int)."""

    def missing_label(self, item: dict) -> str | None:
        """Why a data item has no label, for the reader's refusal (None: it has one)."""
        return None if self.label_key in item else f"missing '{self.label_key}'"

    def check_label_names(self, names: list[str]) -> None:
        """Refuse a given `label_names` list this type cannot train on."""

    @abstractmethod
    def example(self, item_id: str, item: dict, names: list[str], where: str) -> ExampleT:
        """One item of a data file as this type's example, labels as indexes into `names`."""

    # -- model ------------------------------------------------------------------------------
    @abstractmethod
    def model_class(self):
        """The transformers `AutoModelFor...` class of this head."""

    def check_model(self, model, tokenizer, where: str) -> None:
        """Refuse a loaded model or tokenizer this type cannot run (naming `where`)."""

    def prepare_tokenizer(self, tokenizer, where: str):
        """The base's tokenizer as this type trains with it (default: as it is); saved with
        the head, so every later load tokenises the same way."""
        return tokenizer

    def saved_options(self, config, where: str) -> dict:
        """The `predict` / `annotate` options a saved head's config fixes (a tagger's
        segmentation); {} for none. `where`: the head directory, for errors."""
        return {}

    def fit_config(self, model, data) -> None:
        """Record on `model.config` (saved as config.json) what this type takes from the
        training data before training starts (`data`: the `HeadData`)."""

    def pooling(self, requested: str, head_only: bool) -> str | None:
        """`bertindex_pooling` to record for a training run (None: not a pooled head)."""
        return None

    # -- features and training --------------------------------------------------------------
    @abstractmethod
    def encode(self, tokenizer, examples: Sequence[ExampleT]) -> Encoded:
        """Tokenise examples with special tokens and without truncation, in order."""

    @abstractmethod
    def loss(self, model, batch: dict) -> torch.Tensor:
        """Training loss of a collated batch (with `labels`)."""

    @abstractmethod
    def head_modules(self, model) -> list[torch.nn.Module]:
        """The modules that train with `--head-only`."""

    @abstractmethod
    def backbone_features(self, encoder, encoded: Encoded) -> list[torch.Tensor]:
        """Per example the frozen backbone's fp32 features: (hidden,) or (rows, hidden)."""

    @abstractmethod
    def feature_logits(self, model, features: torch.Tensor) -> torch.Tensor:
        """(rows, hidden) features -> (rows, labels) logits through the head's own layers."""

    @abstractmethod
    def feature_targets(self, encoded: Encoded) -> list[torch.Tensor]:
        """Per example the label ids of its feature rows."""

    # -- eval -------------------------------------------------------------------------------
    @abstractmethod
    def logits(self, model, batch: dict) -> torch.Tensor:
        """Logits of a tokenised batch (no `labels`): (B, C) or (B, L, C)."""

    @abstractmethod
    def example_logits(self, out: torch.Tensor, encoded: Encoded, i: int) -> torch.Tensor:
        """Example `i`'s rows of its `logits` output (padding and non-scored tokens dropped)."""

    @abstractmethod
    def score(
        self,
        logits: Sequence[torch.Tensor],
        examples: Sequence[ExampleT],
        encoded: Encoded,
        label_names: Sequence[str],
    ) -> dict:
        """Metrics (`metric` among them) of per-example logits against the examples' labels;
        a type adds its options as keyword parameters (a tagger's `decode`, what a pair head's
        `score_options` give)."""

    def validation_loss(
        self, logits: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], model=None
    ) -> float:
        """Mean cross-entropy of per-example logits ((C,) or (rows, C)) against their
        `feature_targets` (the tie-break of `--epochs auto`); `model` for types whose loss
        reads its config."""
        import torch

        width = logits[0].shape[-1]
        x = torch.cat([t.reshape(-1, width) for t in logits]).float()
        return float(
            torch.nn.functional.cross_entropy(x, torch.cat([t.reshape(-1) for t in targets]))
        )

    def receipt_fields(self, validation: dict | None, test: dict | None) -> dict:
        """Extra top-level fields of this type's run receipt."""
        return {}

    def score_options(self, model, examples: Sequence[ExampleT], head: Path | None = None) -> dict:
        """Options of `score` a saved head's config asks for on these examples (a blended
        pair head's cosines); {} for none. `head`: the directory holding what the config
        names (the head's own, or where training keeps it before saving)."""
        return {}

    def blend(
        self,
        model,
        splits: dict,
        logits: dict,
        label_names: list[str],
        encoder: Path | None,
        encoder_name: str | None,
    ) -> dict | None:
        """After training: mix the head's score with another signal by a weight chosen on
        validation, kept on `model.config` (a pair head's bi-encoder cosine); the receipt's
        `blend` record, None for none. The record's `options` (split -> `score` options) are
        taken out by the caller and score those splits."""
        return None

    def blend_tunes(self, model) -> bool:
        """Whether `--blend tuned` fine-tunes a bi-encoder for this head (a regression pair
        head)."""
        return False

    def baseline(
        self, splits: dict, label_names: list[str], seed: int, base: Path | None = None
    ) -> dict | None:
        """A baseline on the same splits (None: none for this type); `base` is the encoder
        the head was trained from (a pair head scores its bi-encoder cosine)."""
        return None

    # -- predict and annotate ---------------------------------------------------------------
    @abstractmethod
    def predict(
        self, texts: Sequence[str], enc, offsets, logits: torch.Tensor, label_names: list[str]
    ) -> list:
        """Results of one padded batch of whole texts: one result, or one list of results,
        per text. A type adds its options as keyword parameters (a tagger's `decode` and
        `segmentation`).

        Args:
            enc: the batch's encodings (`word_ids`); offsets: (B, L, 2) character offsets.
            logits: the batch's `logits`.
        """

    @abstractmethod
    def top(self, model, device: torch.device) -> torch.nn.Module:
        """The head's own layers over a shared backbone: (B, L, H) hidden states and mask
        (None: no padding) -> fp32 logits. For `splittable` architectures only."""

    @abstractmethod
    def window_output(self, out: torch.Tensor, n_tokens: int) -> np.ndarray:
        """What to keep of one window's logits ([CLS] + `n_tokens` + [SEP])."""

    def text_logits(
        self,
        n_texts: int,
        n_labels: int,
        windows: Sequence[tuple[int, int, int]],
        outputs: Sequence[np.ndarray],
    ) -> np.ndarray:
        """(texts, labels) logits of each text from its windows' `window_output`s, as
        `annotate` reduces them before its softmax; for types that score texts
        (`Capabilities.scores_texts`) only.

        Args:
            windows: (text index, token start, token end) per window.
        """
        raise ModelError(f"a {self.name} head gives no score per label of a text")

    @abstractmethod
    def annotate(
        self,
        head: str,
        label_names: list[str],
        texts: Sequence[str],
        enc,
        windows: Sequence[tuple[int, int, int]],
        outputs: Sequence[np.ndarray],
    ) -> list[list]:
        """Per text, its results from the windows' `window_output`s. A type whose
        `saved_options` are not empty takes them as keyword parameters.

        Args:
            windows: (text index, token start, token end) per window.
            enc: the texts' encodings (no special tokens, with offsets).
        """


def bert_head_parts(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(dropout, classifier) of a BERT-style head, the layers `--head-only` trains.

    Raises:
        ModelError: naming the model class and the way out (train without --head-only).
    """
    dropout, classifier = getattr(model, "dropout", None), getattr(model, "classifier", None)
    if dropout is None or classifier is None or not hasattr(model.base_model, "embeddings"):
        raise ModelError(
            f"--head-only supports BERT-style models (dropout + classifier head); "
            f"{type(model).__name__} is not one; train without --head-only"
        )
    return dropout, classifier
