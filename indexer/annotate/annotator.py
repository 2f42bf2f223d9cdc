"""Bulk annotation: run trained heads (classifiers, NER taggers) over many texts at once.

Heads whose backbones hold the same weights (head-only heads on the packaged encoder) share one
encoder pass per batch; each head then applies only its own top layers (its head type's `top`).
What a head keeps of each window and how it turns windows into results (labels, entity spans
decoded as `predict` decodes them) is its head type's (`heads.base.HeadType`). Texts are tokenised
once, cut into windows (never truncated), length-sorted into batches under a token budget, and
the next chunk of texts is tokenised on a background thread while the current one computes.
`text_logits` gives a classifier's scores per label as `annotate` reduces them, before its
softmax (`indexer.annotate.served`). Does not read files or write the store (see
`indexer.store.annotations` and `flows.annotate`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import types
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from indexer.encode.encoder import plan_batches, stream_map, weights_hash
from indexer.encode.model_facts import forward_inputs, usable_length
from indexer.encode.policy import choose_device, choose_dtype, default_streams, dtype_name
from indexer.encode.pooling import l2_normalize, pool
from indexer.errors import ModelError
from indexer.heads.base import HeadType
from indexer.heads.predict import load_model_dir
from indexer.ingest.chunking import window_spans
from indexer.records.annotations import Annotation

# the store (duckdb) is imported only when a shared pass returns the index's chunks, so that
# annotating alone runs where duckdb is absent (benchmarks/gpu_check.py on a bare GPU machine)
if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from indexer.store import ChunkRows

log = logging.getLogger(__name__)


@dataclass
class Head:
    """One loaded head: its name, version (weights hash), head type and label names.

    `model` is None once its group runs the head's `top` over a shared backbone.
    `options`: what the head's config fixes for annotating (`HeadType.saved_options`: a
    tagger's segmentation of raw text into its training words).
    """

    name: str
    path: Path
    version: str
    kind: HeadType
    labels: list[str]
    model: PreTrainedModel | None
    tokenizer: PreTrainedTokenizerBase
    backbone_key: str
    options: dict = field(default_factory=dict)


def head_version(path: Path) -> str:
    """sha256 of the head's weight files (16 hex digits): a retrained head gets a new version."""
    return weights_hash(Path(path))


def _backbone_key(model) -> str:
    """A hash of the backbone's embedding and encoder tensors (the pooler is the head's own)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.base_model.state_dict().items()):
        if name.startswith("pooler."):
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def parse_head_arg(arg: str) -> tuple[str, Path]:
    """`NAME=DIR` or `DIR` (named after the folder) -> (name, path)."""
    name, sep, path = arg.partition("=")
    if sep and name and not Path(arg).exists():
        return name, Path(path)
    return Path(arg).name, Path(arg)


def load_heads(args: Sequence[str]) -> list[Head]:
    """Load heads by `NAME=DIR` or `DIR`; names must be unique.

    Returns:
        The heads, in the order given.
    """
    heads: list[Head] = []
    for arg in args:
        name, path = parse_head_arg(arg)
        if any(h.name == name for h in heads):
            raise ModelError(f"two heads are named '{name}'; name them with NAME=DIR")
        try:
            kind, model, tokenizer = load_model_dir(path)
        except ModelError as exc:
            raise ModelError(f"head '{name}': {exc}") from None
        if not getattr(tokenizer, "is_fast", False):
            raise ModelError(
                f"head '{name}': {path}: a fast tokenizer (tokenizer.json) is required"
            )
        key = _backbone_key(model) if _splits(kind, model) else f"solo:{name}"
        labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        heads.append(
            Head(
                name,
                path,
                head_version(path),
                kind,
                labels,
                model,
                tokenizer,
                key,
                options=kind.saved_options(model.config, str(path)),
            )
        )
    return heads


def _splits(kind: HeadType, model) -> bool:
    """True when the head's top layers can be split off its BERT backbone (else it runs whole)."""
    return type(model).__name__ in kind.splittable


class _Group:
    """Heads sharing one backbone: one forward pass per batch feeds all of them.

    Split off the backbone, each head's `top` (`HeadType.top`, one per head in order) maps
    the backbone's last hidden state (batch, seq, hidden) and the attention mask (None: no
    padding) to logits; a group that cannot split runs its one head whole (`backbone` None).
    """

    def __init__(self, heads: list[Head], dtype: torch.dtype, device: torch.device):
        self.heads = heads
        first = heads[0].model
        if first is None:
            raise ModelError(f"head '{heads[0].name}' is already split onto another backbone")
        self.tokenizer = heads[0].tokenizer
        self.split = _splits(heads[0].kind, first)
        self.max_positions = min(usable_length(first, self.tokenizer).limit, 512)
        self.embed: _EmbeddingTop | None = None  # the index's embedding, when shared
        self.tops: list[torch.nn.Module] = []
        self.backbone: torch.nn.Module | None = None
        if self.split:
            # top layers stay fp32: the labels come from them, and they cost nothing
            self.tops = [h.kind.top(h.model, device) for h in heads]
            self.backbone = first.base_model
            # each classifier pools with its own pooler (torch's stubs take no None submodule)
            self.backbone.pooler = None  # type: ignore[assignment]
            self.backbone.to(device=device, dtype=dtype).eval()
            for h in heads:
                h.model = None  # the shared backbone and the tops are all that is needed
        else:
            # transformers wraps `to` with functools.wraps, which its stubs read as unbound
            first.to(device=device, dtype=dtype).eval()  # type: ignore[call-arg]

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, embed: bool = False
    ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """One batch: fp32 logits per head, (batch, labels) or (batch, seq, labels), and with
        `embed` the index's pooled embedding (batch, dim) from the same pass.

        `mask` is the batch's attention mask; the model gets None when nothing is padded, so
        that SDPA may take its unmasked fused kernel (as the index's encoder does).
        """
        vectors = None
        attention = None if bool(mask.all()) else mask
        if self.backbone is None:
            head = self.heads[0]
            batch = forward_inputs(head.model, ids, attention)  # token types only where taken
            return [head.kind.logits(head.model, batch).float()], vectors
        top = self.embed if embed else None
        out = self.backbone(
            **forward_inputs(self.backbone, ids, attention),
            output_hidden_states=top is not None and top.layers,
        )
        if top is not None:
            vectors = top(out, mask)
        hidden = out.last_hidden_state.float()  # (batch, seq, hidden)
        return [top_layers(hidden, attention) for top_layers in self.tops], vectors


class _EmbeddingTop:
    """The index's embedding taken from a head group's pass: the encoder's pooling (with the
    encoder's own pooler for `pooler`), L2-normalised when configured, as `Encoder._forward`
    computes it from the same backbone output."""

    def __init__(self, encoder, pooling: str, normalize: bool):
        self.pooling, self.normalize, self.dim = pooling, normalize, encoder.dim
        self.pooler = getattr(encoder.model, "pooler", None) if pooling == "pooler" else None
        self.layers = pooling == "last4"  # needs every layer's states

    def __call__(self, out, mask: torch.Tensor) -> torch.Tensor:
        states = types.SimpleNamespace(
            last_hidden_state=out.last_hidden_state,
            hidden_states=out.hidden_states,
            pooler_output=None if self.pooler is None else self.pooler(out.last_hidden_state),
        )
        vectors = pool(states, mask, self.pooling)
        return l2_normalize(vectors) if self.normalize else vectors


def _same_backbone(backbone, model) -> bool:
    """True when a head group's backbone (pooler dropped) is `model` without its pooler: the
    same architecture and exactly the same tensors, in the same dtype."""
    keys = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "layer_norm_eps",
        "position_embedding_type",
        "vocab_size",
        "max_position_embeddings",
        "type_vocab_size",
    )
    if type(backbone) is not type(model) or any(
        getattr(backbone.config, k, None) != getattr(model.config, k, None) for k in keys
    ):
        return False
    mine = backbone.state_dict()
    theirs = {k: v for k, v in model.state_dict().items() if not k.startswith("pooler.")}
    return mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def _tokenizer_key(tokenizer) -> tuple:
    """What decides a fast tokenizer's ids (vocabulary, normaliser, pre-tokeniser, special ids);
    padding and truncation settings are left out (annotate and index pass their own)."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec.pop("padding", None)
    spec.pop("truncation", None)
    return (
        json.dumps(spec, sort_keys=True),
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        tokenizer.pad_token_id,
    )


class Annotator:
    """Runs heads over texts.

    Args:
        heads: loaded heads (`load_heads`).
        dtype: `auto` (bf16 on CPUs with native bf16 and on CUDA), `fp32` or `bf16`.
        device: `auto`, `cpu` or `cuda`.
        max_length: tokens per window ([CLS] and [SEP] included).
        stride: tokens shared by consecutive windows of a long text.
        batch_tokens: padded tokens per forward pass.
        chunk_texts: texts tokenised ahead on the background thread.
        max_batch: at most this many windows per forward pass (None: the token budget alone).
        max_waste: a batch holds windows at most this share shorter than its longest (padding
            per window); 0 gives equal-length batches; None: the token budget alone.
        streams: batches run at once, each on its own thread with `torch threads // streams`
            intra-op threads. None: one per torch thread on CPU, at most 8 (no OpenMP
            barriers between the cores, which cost most on a busy machine), one on CUDA.

    Long texts: a classifier averages its logits over the text's windows (each window counts
    once, whatever its length), then softmaxes; a tagger takes each token's tag from the
    window where that token sits farthest from a window edge.
    """

    def __init__(
        self,
        heads: list[Head],
        dtype: str = "auto",
        device: str = "auto",
        max_length: int = 256,
        stride: int = 64,
        batch_tokens: int = 16384,
        chunk_texts: int = 4096,
        max_batch: int | None = None,
        max_waste: float | None = 0.05,
        streams: int | None = None,
    ):
        if not heads:
            raise ModelError("no heads to run; give at least one with --heads DIR")
        self.heads = heads
        self.device = choose_device(device)
        self.dtype = choose_dtype(dtype, self.device)
        by_key: dict[str, list[Head]] = {}
        for h in heads:
            by_key.setdefault(h.backbone_key, []).append(h)
        self.groups = [_Group(hs, self.dtype, self.device) for hs in by_key.values()]
        self.max_length = min(max_length, *(g.max_positions for g in self.groups))
        self.stride = min(stride, self.max_length // 4)
        self.batch_tokens = batch_tokens
        self.chunk_texts = chunk_texts
        self.max_batch = max_batch
        self.max_waste = max_waste
        self.streams = max(1, streams or default_streams(self.device))
        self.embed_group: _Group | None = None  # set by share_embedding
        log.info(
            "%d head(s) in %d backbone pass(es) per batch, %s on %s, %d stream(s)",
            len(heads),
            len(self.groups),
            dtype_name(self.dtype),
            self.device,
            self.streams,
        )

    @classmethod
    def for_config(cls, heads: list[Head], config, streams: int | None = None) -> Annotator:
        """An Annotator with the encoder settings of a `Config` (dtype, device, windows, token
        budget): what `bertindex annotate` and `eval head --input raw-text` run (`streams`:
        as the constructor's; `serve` runs one, on the request's thread)."""
        m = config.model
        return cls(
            heads,
            dtype=m.dtype,
            device=m.device,
            max_length=m.max_length,
            stride=config.long_documents.stride,
            batch_tokens=m.batch_tokens,
            streams=streams,
        )

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    def versions(self) -> dict[str, str]:
        return {h.name: h.version for h in self.heads}

    def annotate(self, texts: Sequence[str]) -> list[Annotation]:
        """One Annotation per text, in input order (`chunk_texts` at a time, the next chunk
        tokenised while the current one runs)."""
        step = self.chunk_texts
        parts = (texts[i : i + step] for i in range(0, len(texts), step))
        return [a for part in self.annotate_chunks(parts) for a in part]

    def annotate_chunks(self, chunks: Iterable[Sequence[str]]) -> Iterator[list[Annotation]]:
        """Annotate chunks of texts, tokenising the next chunk while the current one runs.

        Yields:
            One list of Annotations per chunk, in order.
        """
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize") as pool:
            it = iter(chunks)
            first = next(it, None)
            if first is None:
                return
            pending = pool.submit(self.tokenize, first)
            texts = first
            while True:
                encodings = pending.result()
                nxt = next(it, None)
                if nxt is not None:
                    pending = pool.submit(self.tokenize, nxt)
                yield self._run(texts, encodings)
                if nxt is None:
                    return
                texts = nxt

    def share_embedding(self, encoder, config) -> str | None:
        """Let one head group's pass also give the index's vectors (`annotate_and_embed`).

        Shared only when that pass computes what `encoder` computes for the index: the
        group's backbone holds the encoder's weights (same architecture, same tensors in the
        same dtype, same device), the tokenizers agree, and the index cuts the windows the
        heads read (`long_documents.mode: chunk`, the same max_length and stride).

        Args:
            encoder: the index's loaded `Encoder`.
            config: the configuration the index runs with.
        Returns:
            None when shared; otherwise why not (the index then runs its own pass).
        """
        docs = config.long_documents
        if encoder.document_prefix:
            return (
                "model.document_prompt is set: the index's windows start with it, the heads' do not"
            )
        if docs.mode != "chunk":
            return (
                "long_documents.mode is truncate: the index keeps each text's first window "
                "while the heads read them all"
            )
        if (self.max_length, self.stride) != (encoder.config.max_length, docs.stride):
            return (
                f"the heads read windows of {self.max_length} tokens with stride "
                f"{self.stride}, the index {encoder.config.max_length} with stride "
                f"{docs.stride}"
            )
        path = getattr(encoder, "path", None)
        if path is not None and path.dtype == "int8":
            return (
                f"the index encodes in int8, the heads run in {self.dtype_name}: the "
                "index's vectors come from its own pass"
            )
        if (self.device, self.dtype) != (encoder.device, encoder.dtype):
            return (
                f"the heads run in {self.dtype_name} on {self.device}, the index in "
                f"{dtype_name(encoder.dtype)} on {encoder.device}"
            )
        key = None
        for g in self.groups:
            if not g.split or not _same_backbone(g.backbone, encoder.model):
                continue
            key = key or _tokenizer_key(encoder.tokenizer)
            if _tokenizer_key(g.tokenizer) == key:
                g.embed = _EmbeddingTop(encoder, config.model.pooling, config.model.normalize)
                self.embed_group = g
                return None
        return (
            "no head-only head on the index's encoder among the heads (a fully fine-tuned "
            "head has other backbone weights)"
        )

    def annotate_and_embed(self, texts: Sequence[str]) -> tuple[list[Annotation], ChunkRows]:
        """Annotations of `texts` plus the index's chunks of them, from one backbone pass per
        batch (after `share_embedding` returned None).

        Returns:
            (one Annotation per text, ChunkRows whose doc_ids are positions into `texts`, as
            `indexer.indexing.steps.encode_documents` gives them).
        """
        if self.embed_group is None:
            raise ModelError(
                "the index's embedding is not shared with these heads; call share_embedding first"
            )
        return self._run(texts, self.tokenize(texts), embed=True)

    def annotate_tokenized(self, texts: Sequence[str], encodings: list) -> list[Annotation]:
        """`annotate` of texts already tokenised by `tokenize` (one chunk, on this thread)."""
        return self._run(texts, encodings)

    def text_logits(
        self, texts: Sequence[str], encodings: list, first_window: bool = False
    ) -> dict[str, np.ndarray]:
        """Each text's logits per label from every head whose type scores texts
        (`Capabilities.scores_texts`), reduced over its windows as `annotate` reduces them
        before its softmax (a classifier: their mean).

        Args:
            texts: the texts.
            encodings: `tokenize(texts)`.
            first_window: read each text's first window only (a long text cut to the heads'
                `max_length`), not all of them.
        Returns:
            {head name: (texts, labels) float64 logits}.
        """
        mode = "truncate" if first_window else "chunk"
        out = {}
        for g, _, windows, outputs, _ in self._passes(encodings, mode=mode):
            for h, kept in zip(g.heads, outputs):
                if h.kind.capabilities.scores_texts:
                    out[h.name] = h.kind.text_logits(len(texts), len(h.labels), windows, kept)
        return out

    def tokenize(self, texts: Sequence[str]) -> list:
        """Per head group: the fast tokenizer's encodings of `texts` (no special tokens, with
        offsets, no truncation)."""
        out = []
        for g in self.groups:
            enc = g.tokenizer(
                list(texts),
                add_special_tokens=False,
                truncation=False,
                return_offsets_mapping=True,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
            )
            out.append(enc)
        return out

    # -- internals ---------------------------------------------------------------------
    def _run(self, texts: Sequence[str], encodings: list, embed: bool = False):
        """Annotations of `texts`; with `embed`, also (annotations, ChunkRows) of the index."""
        results = [Annotation() for _ in texts]
        chunks = None
        for g, enc, windows, outputs, vectors in self._passes(encodings, embed):
            for h, kept in zip(g.heads, outputs):
                per_text = h.kind.annotate(h.name, h.labels, texts, enc, windows, kept, **h.options)
                for result, found in zip(results, per_text):
                    result.add(found)
            if vectors is not None:
                chunks = _chunk_rows(texts, enc["offset_mapping"], windows, vectors)
        return (results, chunks) if embed else results

    def _passes(self, encodings: list, embed: bool = False, mode: str = "chunk") -> Iterator:
        """Run each head group over its windows of the texts (`mode`: every window, `chunk`,
        or each text's first, `truncate`).

        Yields:
            Per group: (group, its encodings, windows as (text index, token start, token
            end), per head each window's `window_output`, and with `embed` the shared group's
            (windows, dim) vectors, else None).
        """
        room = self.max_length - 2
        with stream_map(self.streams) as run_all:
            for g, enc in zip(self.groups, encodings):
                windows = [
                    (i, s, e)
                    for i, ids in enumerate(enc["input_ids"])
                    for s, e in window_spans(len(ids), room, self.stride, mode)
                ]
                lengths = [e - s + 2 for _, s, e in windows]
                top = g.embed if embed and g is self.embed_group else None
                outputs: list[list] = [[None] * len(windows) for _ in g.heads]  # per head, window
                vectors = np.zeros((len(windows), top.dim), np.float32) if top is not None else None
                batches = self._batches(lengths)
                step = functools.partial(
                    self._forward, g, enc["input_ids"], windows, lengths, top is not None
                )
                for positions, (outs, vecs) in zip(batches, run_all(step, batches)):
                    if vectors is not None and vecs is not None:
                        vectors[positions] = vecs.numpy()
                    for h, out, kept in zip(g.heads, outs, outputs):
                        for row, w in enumerate(positions):
                            _, s, e = windows[w]
                            kept[w] = h.kind.window_output(out[row], e - s)
                yield g, enc, windows, outputs, vectors

    def _forward(
        self, g: _Group, token_ids, windows, lengths, embed: bool, positions: list[int]
    ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """Pad one batch of windows ([CLS] window [SEP]) and run it; outputs on the CPU."""
        tok = g.tokenizer
        cls_id, sep_id, pad_id = tok.cls_token_id, tok.sep_token_id, tok.pad_token_id or 0
        width = lengths[positions[0]]
        ids = torch.full((len(positions), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(positions), width), dtype=torch.long)
        for row, w in enumerate(positions):
            i, s, e = windows[w]
            ids[row, : e - s + 2] = torch.as_tensor([cls_id, *token_ids[i][s:e], sep_id])
            mask[row, : e - s + 2] = 1
        with torch.inference_mode():  # per thread: each stream enters it itself
            outs, vectors = g.forward(ids.to(self.device), mask.to(self.device), embed)
            return [o.cpu() for o in outs], None if vectors is None else vectors.cpu()

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Length-sorted batches under the token budget, `max_waste` and `max_batch`."""
        planned = plan_batches(lengths, self.batch_tokens, self.max_waste)
        if not self.max_batch:
            return planned
        return [
            b[i : i + self.max_batch] for b in planned for i in range(0, len(b), self.max_batch)
        ]


def _chunk_rows(texts: Sequence[str], offsets, windows, vectors: np.ndarray) -> ChunkRows:
    """The index's chunks of a shared pass: each window's ordinal and character span, as
    `indexer.ingest.chunking.make_windows` gives them, with its vector."""
    owners: list[int] = []
    ordinals: list[int] = []
    starts, ends, n_tokens = [], [], []
    for i, s, e in windows:
        ordinals.append(ordinals[-1] + 1 if owners and owners[-1] == i else 0)
        owners.append(i)
        first, last = (offsets[i][s][0], offsets[i][e - 1][1]) if e > s else (0, len(texts[i]))
        starts.append(first)
        ends.append(last)
        n_tokens.append(e - s + 2)
    from indexer.store import ChunkRows

    return ChunkRows(owners, ordinals, starts, ends, n_tokens, vectors)
