"""Encoder: tokenizer + HF `AutoModel` + pooling, run in length-sorted batches under a token budget.

Does not know about documents or storage; it turns token sequences (or texts) into vectors,
returned in the order they were given. Which device and dtype it runs in is decided in
`indexer.encode.policy`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from indexer.config import ModelConfig, resolve_model_path
from indexer.core.progress import Progress, ProgressArg
from indexer.encode.model_facts import (
    check_length,
    load_transformer,
    special_tokens,
    takes_token_types,
    usable_length,
)
from indexer.encode.policy import choose_device, choose_path, default_streams, load_dtype
from indexer.encode.pooling import l2_normalize, pool
from indexer.encode.quantize import DEFAULT_VARIANT, quantize_int8
from indexer.errors import ModelError
from indexer.records.provenance import Provenance, model_display_name, weights_hash

log = logging.getLogger(__name__)

MAX_BATCH = 1024  # sequences per forward pass, whatever the token budget allows


def plan_batches(
    lengths: Sequence[int], batch_tokens: int, max_waste: float | None = None
) -> list[list[int]]:
    """Group sequence positions into batches, longest first, under a padded-token budget.

    A batch holds positions of similar length; its padded size (count × longest) stays within
    `batch_tokens`, except that a single over-budget sequence still forms a batch of one.

    Args:
        lengths: token count of each sequence (special tokens included).
        batch_tokens: padded tokens allowed per batch.
        max_waste: also start a new batch when the next sequence is shorter than the batch's
            longest by more than this share (0.05: at most 5 % padding per sequence; 0:
            equal lengths only, batches that need no attention mask). None: the budget alone.
    Returns:
        Lists of positions into `lengths`; every position appears exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (
            (len(current) + 1) * longest > batch_tokens
            or len(current) >= MAX_BATCH
            or (max_waste is not None and lengths[i] < longest * (1 - max_waste))
        ):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


@contextlib.contextmanager
def stream_map(streams: int) -> Iterator[Callable]:
    """A `map` that runs calls `streams` at a time, results in input order.

    Each stream is one thread with `torch threads // streams` intra-op threads: on a CPU,
    two single-thread forwards side by side skip the OpenMP barriers a 2-thread forward waits
    on at every op, which cost most when the machine is busy. `streams` 1 is the plain `map`.
    """
    if streams <= 1:
        yield map
        return
    per_stream = max(1, torch.get_num_threads() // streams)
    with ThreadPoolExecutor(
        streams,
        thread_name_prefix="forward",
        initializer=torch.set_num_threads,
        initargs=(per_stream,),
    ) as pool:
        yield pool.map


class Encoder:
    """A transformer encoder (any family `indexer.encode.model_facts` reads) that pools and
    (optionally) normalises.

    Args:
        config: the `model` section of the configuration.
    """

    def __init__(self, config: ModelConfig):
        from transformers import AutoModel, AutoTokenizer

        self.config = config
        self.model_dir = resolve_model_path(config.name)
        self.device = choose_device(config.device)
        self.path = choose_path(config.dtype, self.device, self.model_dir)
        self.dtype = load_dtype(self.path.dtype)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, use_fast=True)
            # sdpa where the model class supports it (MPNet, DeBERTa-v2 do not: eager)
            self.model, self.attention = load_transformer(
                self.model_dir, AutoModel, dtype=self.dtype
            )
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load model from {self.model_dir}: {exc}") from None
        if not self.tokenizer.is_fast:
            raise ModelError(f"{self.model_dir}: a fast tokenizer (tokenizer.json) is required")
        self.backend = _plain_backend(self.tokenizer)
        self.model.eval().to(self.device)
        self.length = usable_length(self.model, self.tokenizer)
        check_length(config.max_length, self.length, "model.max_length", str(self.model_dir))
        self.token_types = takes_token_types(self.model)
        self.streams = config.streams or default_streams(self.device)
        # the tokenizer's own framing of one text ([CLS] … [SEP], <s> … </s>), pad id and side
        self.specials = special_tokens(self.tokenizer, str(self.model_dir))
        self.cls_id, self.sep_id = self.specials.prefix[0], self.specials.suffix[0]
        self.pad_id = self.specials.pad_id
        self.left_pad = self.specials.padding_side == "left"
        if self.left_pad and config.pooling in ("cls", "pooler"):
            raise ModelError(
                f"{self.model_dir}: the tokenizer pads on the left, so position 0 "
                f"is padding and model.pooling {config.pooling} would read it; "
                "set model.pooling to mean"
            )
        if self.path.dtype == "int8":
            self.model = quantize_int8(
                self.model, self.path.variant or DEFAULT_VARIANT, calibration=self.calibrate
            )
        hidden = self.model.config.hidden_size
        self.dim = hidden * 4 if config.pooling == "last4" else hidden
        self.provenance = Provenance(
            model_name=model_display_name(self.model_dir, config.name),
            weights_hash=weights_hash(self.model_dir),
            pooling=config.pooling,
            normalize=config.normalize,
            max_length=config.max_length,
            dim=self.dim,
            dtype=self.path.dtype,
            document_prompt=config.document_prompt,
            query_prompt=config.query_prompt,
            attention=self.attention,
        )
        # the document prompt's tokens, put after [CLS] in every window (`make_windows`)
        self.document_prefix = (
            self.tokenize([config.document_prompt])[0] if config.document_prompt else []
        )
        log.info(
            "encoder %s on %s in %s (dim %d): %s",
            self.provenance.model_name,
            self.device,
            self.provenance.dtype,
            self.dim,
            self.path.reason,
        )

    def release(self) -> None:
        """Free the model's weights; this encoder cannot encode afterwards (see
        `OnnxEncoder.release`), and `load_encoder` forgets the encoders it kept, so that a
        later load gets a working one."""
        self.model = None
        load_encoder.cache_clear()

    def calibrate(self, model, passages: int = 32) -> None:
        """Run `model` over a fixed sample of Python standard-library docstrings (present on
        every machine), the calibration of the smoothed int8 variants."""
        import itertools

        from indexer.ingest.stdlib_corpus import iter_passages

        texts = [p["text"] for p in itertools.islice(iter_passages(), 0, passages * 8, 8)]
        room = self.config.max_length - 2
        seqs = [self.wrap(ids[:room]) for ids in self.tokenize(texts)]
        for start in range(0, len(seqs), 16):
            ids, mask = self.pad(seqs[start : start + 16])
            model(**self.inputs(ids.to(self.device), mask.to(self.device)))

    def pad(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask), each (batch, longest), padded with the tokenizer's pad id on its
        padding side."""
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            span = slice(width - len(seq), width) if self.left_pad else slice(0, len(seq))
            ids[row, span] = torch.as_tensor(seq, dtype=torch.long)
            mask[row, span] = 1
        return ids, mask

    def inputs(self, ids: torch.Tensor, mask: torch.Tensor | None) -> dict:
        """A forward's keyword arguments: token type ids (all zero) only for a model that
        takes them."""
        out = {"input_ids": ids, "attention_mask": mask}
        if self.token_types:
            out["token_type_ids"] = torch.zeros_like(ids)
        return out

    # -- tokenisation -------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], offsets: bool = False):
        """Token ids without special tokens (and character offsets when asked), no truncation.

        What `tokenizer(texts, add_special_tokens=False)` returns, read from the Rust
        tokenizer's encodings directly: transformers' conversion of each encoding to a dict
        cost as much as the tokenizing (`benchmarks/scale.py`)."""
        if not texts:
            return ([], []) if offsets else []
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=False)
        ids = [e.ids for e in encodings]
        return (ids, [e.offsets for e in encodings]) if offsets else ids

    def wrap(self, ids: Sequence[int]) -> list[int]:
        """The tokenizer's framing around ids: [CLS] ids [SEP], <s> ids </s>, …"""
        return [self.cls_id, *ids, self.sep_id]

    # -- forward ------------------------------------------------------------------------
    def encode_ids(
        self, sequences: Sequence[Sequence[int]], progress: ProgressArg = False
    ) -> np.ndarray:
        """Encode token id sequences that already carry their special tokens.

        Args:
            sequences: each at most `max_length` ids, e.g. `wrap(window)`.
            progress: a progress mode (`indexer.core.progress`): bar, lines or off (True: bar).
        Returns:
            (len(sequences), dim) float32, in input order.
        """
        out = np.zeros((len(sequences), self.dim), dtype=np.float32)
        for positions, vectors in self._run(sequences, self._forward, progress):
            out[positions] = vectors
        return out

    def token_states(
        self,
        sequences: Sequence[Sequence[int]],
        keep: Sequence[Sequence[int]] | None = None,
        progress: ProgressArg = False,
    ) -> list[np.ndarray]:
        """The last layer's token states, batched like `encode_ids` (no pooling).

        Args:
            sequences: token ids with their special tokens, each at most `max_length`.
            keep: per sequence, the token positions to return (None: every token).
        Returns:
            One (tokens kept, hidden) float32 array per sequence, in input order.
        """

        def states(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(
                **self.inputs(ids, None if bool(mask.all()) else mask)
            ).last_hidden_state.float()

        out: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(sequences)
        for positions, hidden in self._run(sequences, states, progress):
            width = hidden.shape[1]
            for row, i in enumerate(positions):
                rows = list(keep[i]) if keep is not None else list(range(len(sequences[i])))
                shift = width - len(sequences[i]) if self.left_pad else 0
                out[i] = hidden[row, [r + shift for r in rows]]
        return out

    def plan(self, lengths: Sequence[int]) -> list[list[int]]:
        """Length-sorted batches under `batch_tokens` and `max_waste`.

        Raises:
            ValueError: a sequence is longer than `max_length`.
        """
        too_long = [i for i, n in enumerate(lengths) if n > self.config.max_length]
        if too_long:
            raise ValueError(
                f"{len(too_long)} sequences exceed max_length {self.config.max_length} "
                f"(first at position {too_long[0]}, {lengths[too_long[0]]} tokens)"
            )
        return plan_batches(lengths, self.config.batch_tokens, self.config.max_waste)

    def _run(self, sequences: Sequence[Sequence[int]], forward, progress: ProgressArg):
        """Yield (positions, float32 array) per batch, `streams` batches in flight at once.

        `forward(ids, mask)` runs on batches padded on the tokenizer's side; each stream
        enters inference mode itself (it is thread-local).
        """
        if not sequences:
            return
        lengths = [len(s) for s in sequences]
        batches = self.plan(lengths)

        def run(positions: list[int]) -> np.ndarray:
            ids, mask = self.pad([sequences[i] for i in positions])
            with torch.inference_mode():
                return forward(ids.to(self.device), mask.to(self.device)).cpu().numpy()

        bar = _progress(len(sequences), progress)
        # by default no more streams than the calling thread's torch threads (a server
        # request's thread is capped to `serve --threads`: more would oversubscribe the cores)
        streams = self.streams if self.config.streams else torch.get_num_threads()
        with stream_map(min(self.streams, streams, len(batches))) as run_all:
            for positions, result in zip(batches, run_all(run, batches)):
                yield positions, result
                bar.update(len(positions))
        bar.close()

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        need_layers = self.config.pooling == "last4"
        # A batch without padding needs no mask, which lets SDPA take its fused kernel.
        outputs = self.model(
            **self.inputs(ids, None if bool(mask.all()) else mask), output_hidden_states=need_layers
        )
        vectors = pool(outputs, mask, self.config.pooling)  # (batch, dim) float32
        return l2_normalize(vectors) if self.config.normalize else vectors

    def encode_texts(self, texts: Sequence[str], progress: ProgressArg = False) -> np.ndarray:
        """Encode short texts, one vector each, truncated to `max_length` tokens.

        For documents that may run past `max_length`, use `indexer.ingest.chunking` instead, which
        windows them rather than cutting them.
        """
        room = self.config.max_length - 2
        seqs = [self.wrap(ids[:room]) for ids in self.tokenize(texts)]
        return self.encode_ids(seqs, progress=progress)

    def encode_queries(self, queries: Sequence[str], progress: bool = False) -> np.ndarray:
        """Encode search queries: `model.query_prompt` + query, as `encode_texts`."""
        prompt = self.config.query_prompt
        return self.encode_texts([prompt + q for q in queries] if prompt else queries, progress)


def _plain_backend(tokenizer):
    """A private copy of a fast tokenizer's Rust tokenizer with truncation and padding off,
    as transformers sets them for a call without either; never changed afterwards, so threads
    may encode with it at once."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend


def _progress(total: int, mode: ProgressArg):
    return Progress(total, "encoding", "seq", mode)


@functools.lru_cache(maxsize=2)
def load_encoder(config: ModelConfig) -> Encoder:
    """An Encoder for this configuration, loaded once per process."""
    return Encoder(config)
