"""Bulk annotation: run trained heads (classifiers, NER taggers) over many texts at once.

Heads whose backbones hold the same weights (head-only heads on the packaged encoder) share one
encoder pass per batch; each head then applies only its own top layers. Texts are tokenised
once, cut into windows (never truncated), length-sorted into batches under a token budget, and
the next chunk of texts is tokenised on a background thread while the current one computes.
Does not read files or write the store (see `indexer.annotation_store` and `flows.annotate`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from indexer.chunking import window_spans
from indexer.encoder import choose_device, choose_dtype, dtype_name, plan_batches, weights_hash
from indexer.errors import ModelError
from indexer.heads.labels import merge_subwords, word_spans
from indexer.heads.predict import load_model_dir

log = logging.getLogger(__name__)

# Heads whose top layers can be split off their BERT backbone (anything else runs whole).
_SPLITTABLE = {"BertForSequenceClassification": "classifier", "BertForTokenClassification": "ner"}


@dataclass(frozen=True)
class Label:
    head: str
    label: str
    probability: float


@dataclass(frozen=True)
class Span:
    head: str
    type: str
    start: int  # character offsets into the text, end exclusive
    end: int
    text: str
    score: float  # mean probability of the words' tags


@dataclass
class Annotation:
    """All heads' output for one text."""

    labels: list[Label] = field(default_factory=list)
    entities: list[Span] = field(default_factory=list)


@dataclass
class Head:
    """One loaded head: its name, version (weights hash), task and label names.

    `top` maps the backbone's last hidden state (batch, seq, hidden) to logits; None when the
    head runs whole (`model`).
    """

    name: str
    path: Path
    version: str
    task: str  # "classifier" | "ner"
    labels: list[str]
    model: torch.nn.Module
    tokenizer: object
    backbone_key: str
    top: object = None


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
        task, model, tokenizer = load_model_dir(path)
        if not getattr(tokenizer, "is_fast", False):
            raise ModelError(f"{path}: a fast tokenizer (tokenizer.json) is required")
        arch = type(model).__name__
        key = _backbone_key(model) if arch in _SPLITTABLE else f"solo:{name}"
        labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        heads.append(Head(name, path, head_version(path), task, labels, model, tokenizer, key))
    return heads


class _Group:
    """Heads sharing one backbone: one forward pass per batch feeds all of them."""

    def __init__(self, heads: list[Head], dtype: torch.dtype, device: torch.device):
        self.heads = heads
        first = heads[0].model
        self.tokenizer = heads[0].tokenizer
        self.split = type(first).__name__ in _SPLITTABLE
        self.max_positions = min(getattr(first.config, "max_position_embeddings", 512), 512)
        if self.split:
            for h in heads:
                # top layers stay fp32: the labels come from them, and they cost nothing
                head_layer = h.model.classifier.to(device).float()
                if h.task == "classifier":
                    h.top = _ClassifierTop(h.model.base_model.pooler.to(device).float(), head_layer)
                else:
                    h.top = head_layer
            self.backbone = first.base_model
            self.backbone.pooler = None  # each classifier pools with its own pooler
            self.backbone.to(device=device, dtype=dtype).eval()
            for h in heads:
                h.model = None  # the shared backbone and the tops are all that is needed
        else:
            self.backbone = None
            first.to(device=device, dtype=dtype).eval()

    def logits(self, ids: torch.Tensor, mask: torch.Tensor | None) -> list[torch.Tensor]:
        """One tensor of fp32 logits per head: (batch, labels) or (batch, seq, labels)."""
        if not self.split:
            out = self.heads[0].model(input_ids=ids, attention_mask=mask,
                                      token_type_ids=torch.zeros_like(ids))
            return [out.logits.float()]
        hidden = self.backbone(input_ids=ids, attention_mask=mask,
                               token_type_ids=torch.zeros_like(ids)).last_hidden_state
        hidden = hidden.float()  # (batch, seq, hidden)
        return [h.top(hidden) for h in self.heads]


class _ClassifierTop(torch.nn.Module):
    def __init__(self, pooler, classifier):
        super().__init__()
        self.pooler, self.classifier = pooler, classifier

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pooler(hidden))  # pooler reads [CLS]: hidden[:, 0]


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

    Long texts: a classifier averages its logits over the text's windows (each window counts
    once, whatever its length), then softmaxes; a tagger takes each token's tag from the
    window where that token sits farthest from a window edge.
    """

    def __init__(self, heads: list[Head], dtype: str = "auto", device: str = "auto",
                 max_length: int = 256, stride: int = 64, batch_tokens: int = 16384,
                 chunk_texts: int = 4096, max_batch: int | None = None):
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
        log.info("%d head(s) in %d backbone pass(es) per batch, %s on %s", len(heads),
                 len(self.groups), dtype_name(self.dtype), self.device)

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    def versions(self) -> dict[str, str]:
        return {h.name: h.version for h in self.heads}

    def annotate(self, texts: Sequence[str]) -> list[Annotation]:
        """One Annotation per text, in input order (`chunk_texts` at a time, the next chunk
        tokenised while the current one runs)."""
        step = self.chunk_texts
        parts = (texts[i:i + step] for i in range(0, len(texts), step))
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
            pending = pool.submit(self._tokenize_all, first)
            texts = first
            while True:
                encodings = pending.result()
                nxt = next(it, None)
                if nxt is not None:
                    pending = pool.submit(self._tokenize_all, nxt)
                yield self._run(texts, encodings)
                if nxt is None:
                    return
                texts = nxt

    # -- internals ---------------------------------------------------------------------
    def _tokenize_all(self, texts: Sequence[str]) -> list:
        """Per group: the fast tokenizer's encodings (no special tokens, offsets, no truncation)."""
        out = []
        for g in self.groups:
            enc = g.tokenizer(list(texts), add_special_tokens=False, truncation=False,
                              return_offsets_mapping=True, return_attention_mask=False,
                              return_token_type_ids=False, verbose=False)
            out.append(enc)
        return out

    @torch.inference_mode()
    def _run(self, texts: Sequence[str], encodings: list) -> list[Annotation]:
        results = [Annotation() for _ in texts]
        room = self.max_length - 2
        for g, enc in zip(self.groups, encodings):
            tok = g.tokenizer
            cls_id, sep_id = tok.cls_token_id, tok.sep_token_id
            pad_id = tok.pad_token_id or 0
            # windows: (text index, token start, token end)
            windows: list[tuple[int, int, int]] = []
            for i, ids in enumerate(enc["input_ids"]):
                for s, e in window_spans(len(ids), room, self.stride, "chunk"):
                    windows.append((i, s, e))
            lengths = [e - s + 2 for _, s, e in windows]
            cls_logits = [np.zeros((len(windows), len(h.labels)), np.float32)
                          if h.task == "classifier" else None for h in g.heads]
            tok_logits: list[list] = [[None] * len(windows) if h.task == "ner" else None
                                      for h in g.heads]
            for positions in self._batches(lengths):
                width = lengths[positions[0]]
                ids_t = torch.full((len(positions), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(positions), width), dtype=torch.long)
                for row, w in enumerate(positions):
                    i, s, e = windows[w]
                    seq = [cls_id, *enc["input_ids"][i][s:e], sep_id]
                    ids_t[row, : len(seq)] = torch.as_tensor(seq)
                    mask[row, : len(seq)] = 1
                full = bool(mask.all())  # no padding: SDPA may take its unmasked fused kernel
                outs = g.logits(ids_t.to(self.device), None if full else mask.to(self.device))
                for h_i, (h, out) in enumerate(zip(g.heads, outs)):
                    out = out.cpu()
                    if h.task == "classifier":
                        cls_logits[h_i][positions] = out.numpy()
                    else:
                        for row, w in enumerate(positions):
                            _, s, e = windows[w]
                            tok_logits[h_i][w] = out[row, 1 : 1 + e - s].numpy()
            for h_i, h in enumerate(g.heads):
                if h.task == "classifier":
                    self._classify(h, windows, cls_logits[h_i], results)
                else:
                    self._tag(h, texts, enc, windows, tok_logits[h_i], results)
        return results

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Length-sorted batches under the token budget (and `max_batch`)."""
        planned = plan_batches(lengths, self.batch_tokens)
        if not self.max_batch:
            return planned
        return [b[i:i + self.max_batch] for b in planned for i in range(0, len(b), self.max_batch)]

    @staticmethod
    def _classify(h: Head, windows, logits: np.ndarray, results: list[Annotation]) -> None:
        n = len(results)
        sums = np.zeros((n, logits.shape[1]), np.float64)
        counts = np.zeros(n, np.int64)
        doc = np.fromiter((w[0] for w in windows), np.int64, len(windows))
        np.add.at(sums, doc, logits)
        np.add.at(counts, doc, 1)
        mean = sums / np.maximum(counts, 1)[:, None]  # average of window logits
        mean -= mean.max(axis=1, keepdims=True)
        probs = np.exp(mean)
        probs /= probs.sum(axis=1, keepdims=True)
        best = probs.argmax(axis=1)
        for i in range(n):
            results[i].labels.append(Label(h.name, h.labels[best[i]], float(probs[i, best[i]])))

    def _tag(self, h: Head, texts, enc, windows, logits, results: list[Annotation]) -> None:
        by_text: dict[int, list[tuple[int, int, np.ndarray]]] = {}
        for w, (i, s, e) in enumerate(windows):
            by_text.setdefault(i, []).append((s, e, logits[w]))
        for i, text in enumerate(texts):
            parts = by_text.get(i, [])
            n_tok = len(enc["input_ids"][i])
            if n_tok == 0:
                continue
            tok = _stitch(parts, n_tok)  # (n_tok, labels): each token from its best window
            results[i].entities.extend(
                _entities(h, text, enc.word_ids(i), enc["offset_mapping"][i], tok))


def _stitch(parts: list[tuple[int, int, np.ndarray]], n_tok: int) -> np.ndarray:
    """Token logits of a whole text from its windows: each token from the window where it is
    farthest from an edge (its widest context)."""
    if len(parts) == 1:
        return parts[0][2]
    out = np.zeros((n_tok, parts[0][2].shape[1]), np.float32)
    margin = np.full(n_tok, -1, np.int64)
    for s, e, lg in parts:
        pos = np.arange(s, e)
        m = np.minimum(pos - s, e - 1 - pos)
        better = m > margin[s:e]
        out[pos[better]] = lg[better]
        margin[pos[better]] = m[better]
    return out


def _entities(h: Head, text: str, word_ids, offsets, logits: np.ndarray) -> list[Span]:
    """Merge subwords into words (a word takes its first subword's tag), then BIO spans."""
    lg = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(lg)
    probs /= probs.sum(axis=1, keepdims=True)
    best = probs.argmax(axis=1)
    words = merge_subwords(word_ids, offsets)  # [start, end, first-subword position]
    tags = [h.labels[best[w[2]]] for w in words]
    scores = [float(probs[w[2], best[w[2]]]) for w in words]
    return [Span(h.name, *span) for span in word_spans(words, tags, scores, text)]
