"""Encoder: tokenizer + HF `AutoModel` + pooling, run in length-sorted batches under a token budget.

Does not know about documents or storage; it turns token sequences (or texts) into vectors,
returned in the order they were given.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from indexer import machine
from indexer.config import ModelConfig, resolve_model_path
from indexer.encode import int8_check
from indexer.encode.pooling import l2_normalize, pool
from indexer.encode.quantize import DEFAULT_VARIANT, quantize_int8
from indexer.errors import ModelError
from indexer.progress import Progress, ProgressArg
from indexer.provenance import (
    Provenance,
    model_display_name,
    weights_hash,
)

log = logging.getLogger(__name__)

MAX_BATCH = 1024  # sequences per forward pass, whatever the token budget allows
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def cpu_has_bf16() -> bool:
    """True when the CPU has native bf16 matrix instructions (AVX512-BF16 or AMX).

    Reads `indexer.machine.cpu_flags`, which `BERTINDEX_CPU_FEATURES` overrides.
    """
    return machine.has_bf16()


def choose_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("model.device is 'cuda' but torch sees no CUDA device; use auto or cpu")
    return torch.device(device)


@dataclass(frozen=True)
class EncoderPath:
    """How the encoder runs here: `dtype` (fp32, bf16, fp16 or int8), the int8 variant, and
    why `dtype: auto` (or the configured dtype) led there."""

    dtype: str
    reason: str
    variant: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def choose_path(dtype: str, device: torch.device, model_dir: Path | None = None) -> EncoderPath:
    """The encoder path for `model.dtype` on this device (and, for int8, this model).

    `auto` on CUDA: bf16 where supported, else fp16. On a CPU: int8 where the model has a
    passed int8 check record for this CPU's ISA class that was faster than the path `auto`
    would otherwise take; else bf16 with native bf16 (AVX512-BF16/AMX); else fp32.
    """
    if dtype == "fp16" and device.type == "cpu":
        raise ModelError("fp16 is not supported on CPU; use fp32, bf16 or int8")
    if dtype == "int8":
        if device.type != "cpu":
            raise ModelError("int8 runs on CPU only; use model.device cpu, or dtype auto on CUDA")
        record = int8_check.find(model_dir) if model_dir is not None else None
        verdict = int8_check.verdict(record, machine.isa_class())
        if not verdict.passed:
            log.warning("int8 on this model: %s; vectors may differ from fp32 more than the "
                        "quality gates allow", verdict.why)
        return EncoderPath("int8", f"configured; {verdict.why}",
                           verdict.variant or DEFAULT_VARIANT)
    if dtype != "auto":
        if dtype not in _DTYPES:
            raise ModelError(f"unknown model.dtype {dtype!r}; one of auto, fp32, bf16, fp16, int8")
        return EncoderPath(dtype, "configured")
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported()
        return EncoderPath("bf16" if bf16 else "fp16",
                           "auto on CUDA: " + ("bf16 supported" if bf16 else "no bf16, fp16"))
    flags, source = machine.cpu_flags()
    native = [f for f in machine.BF16_FLAGS if f in flags]
    fallback = "bf16" if native else "fp32"
    why = (f"auto on CPU: native bf16 ({', '.join(native)})" if native
           else "auto on CPU: no native bf16 (no avx512_bf16/amx_bf16)") + f" per {source}"
    if model_dir is not None:
        verdict = int8_check.verdict(int8_check.find(model_dir), machine.isa_class())
        if verdict.passed and verdict.faster_than(fallback):
            return EncoderPath("int8", f"{why}; int8 check passed and faster than {fallback} "
                               f"on {machine.isa_class()} ({verdict.why})", verdict.variant)
        why += f"; int8 not chosen: {verdict.why if not verdict.passed else 'not faster'}"
    return EncoderPath(fallback, why)


def describe_path(config: ModelConfig) -> dict:
    """The encoder path this configuration takes on this machine, without loading the model:
    {dtype, reason, variant, device, cpu_model, isa_class, isa_source, emulated}."""
    device = choose_device(config.device)
    try:
        model_dir = resolve_model_path(config.name)
    except Exception:  # noqa: BLE001 - a missing model is reported by the commands that load it
        model_dir = None
    path = choose_path(config.dtype, device, model_dir)
    flags, source = machine.cpu_flags()
    return {**path.to_dict(), "configured": config.dtype, "device": device.type,
            "cpu_model": machine.cpu_model(), "isa_class": machine.isa_class(),
            "isa_flags": sorted(f for f in machine.ISA_FLAGS if f in flags),
            "isa_source": source, "emulated": machine.emulated()}


def choose_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype the model is loaded in: `auto` as `choose_path` without int8; int8 is
    loaded in fp32 and quantised afterwards."""
    name = choose_path(dtype, device).dtype
    return torch.float32 if name == "int8" else _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in _DTYPES.items()}[dtype]


def plan_batches(lengths: Sequence[int], batch_tokens: int,
                 max_waste: float | None = None) -> list[list[int]]:
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
        if current and ((len(current) + 1) * longest > batch_tokens or len(current) >= MAX_BATCH
                        or (max_waste is not None and lengths[i] < longest * (1 - max_waste))):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def default_streams(device: torch.device, threads: int | None = None) -> int:
    """Batches in flight at once: one per torch thread on CPU (at most 8), one on CUDA."""
    if device.type == "cuda":
        return 1
    return max(1, min(threads or torch.get_num_threads(), 8))


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
    with ThreadPoolExecutor(streams, thread_name_prefix="forward",
                            initializer=torch.set_num_threads, initargs=(per_stream,)) as pool:
        yield pool.map


class Encoder:
    """A BERT-style encoder that pools and (optionally) normalises.

    Args:
        config: the `model` section of the configuration.
    """

    def __init__(self, config: ModelConfig):
        from transformers import AutoModel, AutoTokenizer

        self.config = config
        self.model_dir = resolve_model_path(config.name)
        self.device = choose_device(config.device)
        self.path = choose_path(config.dtype, self.device, self.model_dir)
        self.dtype = torch.float32 if self.path.dtype == "int8" else _DTYPES[self.path.dtype]
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, use_fast=True)
            self.model = AutoModel.from_pretrained(
                self.model_dir, attn_implementation="sdpa", dtype=self.dtype
            )
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load model from {self.model_dir}: {exc}") from None
        if not self.tokenizer.is_fast:
            raise ModelError(f"{self.model_dir}: a fast tokenizer (tokenizer.json) is required")
        self.model.eval().to(self.device)
        limit = getattr(self.model.config, "max_position_embeddings", 512)
        if config.max_length > limit:
            raise ModelError(
                f"model.max_length {config.max_length} exceeds the model's {limit} positions"
            )
        self.streams = config.streams or default_streams(self.device)
        self.cls_id = self.tokenizer.cls_token_id
        self.sep_id = self.tokenizer.sep_token_id
        self.pad_id = self.tokenizer.pad_token_id or 0
        if self.path.dtype == "int8":
            self.model = quantize_int8(self.model, self.path.variant or DEFAULT_VARIANT,
                                       calibration=self.calibrate)
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
        )
        # the document prompt's tokens, put after [CLS] in every window (`make_windows`)
        self.document_prefix = (self.tokenize([config.document_prompt])[0]
                                if config.document_prompt else [])
        log.info(
            "encoder %s on %s in %s (dim %d): %s",
            self.provenance.model_name, self.device, self.provenance.dtype, self.dim,
            self.path.reason,
        )

    def calibrate(self, model, passages: int = 32) -> None:
        """Run `model` over a fixed sample of Python standard-library docstrings (present on
        every machine), the calibration of the smoothed int8 variants."""
        import itertools

        from indexer.ingest.stdlib_corpus import iter_passages

        texts = [p["text"] for p in itertools.islice(iter_passages(), 0, passages * 8, 8)]
        room = self.config.max_length - 2
        seqs = [self.wrap(ids[:room]) for ids in self.tokenize(texts)]
        for start in range(0, len(seqs), 16):
            batch = seqs[start:start + 16]
            width = max(len(s) for s in batch)
            ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, seq in enumerate(batch):
                ids[row, :len(seq)] = torch.as_tensor(seq)
                mask[row, :len(seq)] = 1
            model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                  token_type_ids=torch.zeros_like(ids).to(self.device))

    # -- tokenisation -------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], offsets: bool = False):
        """Token ids without special tokens (and character offsets when asked), no truncation."""
        if not texts:
            return ([], []) if offsets else []
        enc = self.tokenizer(
            list(texts),
            add_special_tokens=False,
            truncation=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            return_offsets_mapping=offsets,
            verbose=False,
        )
        if offsets:
            return enc["input_ids"], enc["offset_mapping"]
        return enc["input_ids"]

    def wrap(self, ids: Sequence[int]) -> list[int]:
        """[CLS] ids [SEP]."""
        return [self.cls_id, *ids, self.sep_id]

    # -- forward ------------------------------------------------------------------------
    def encode_ids(self, sequences: Sequence[Sequence[int]], progress: ProgressArg = False) -> np.ndarray:
        """Encode token id sequences that already carry their special tokens.

        Args:
            sequences: each at most `max_length` ids, e.g. `wrap(window)`.
            progress: a progress mode (`indexer.progress`): bar, lines or off (True: bar).
        Returns:
            (len(sequences), dim) float32, in input order.
        """
        out = np.zeros((len(sequences), self.dim), dtype=np.float32)
        for positions, vectors in self._run(sequences, self._forward, progress):
            out[positions] = vectors
        return out

    def token_states(self, sequences: Sequence[Sequence[int]], keep: Sequence[Sequence[int]] | None = None,
                     progress: ProgressArg = False) -> list[np.ndarray]:
        """The last layer's token states, batched like `encode_ids` (no pooling).

        Args:
            sequences: token ids with their special tokens, each at most `max_length`.
            keep: per sequence, the token positions to return (None: every token).
        Returns:
            One (tokens kept, hidden) float32 array per sequence, in input order.
        """
        def states(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(
                input_ids=ids, attention_mask=None if bool(mask.all()) else mask,
                token_type_ids=torch.zeros_like(ids),
            ).last_hidden_state.float()

        out: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(sequences)
        for positions, hidden in self._run(sequences, states, progress):
            for row, i in enumerate(positions):
                rows = list(keep[i]) if keep is not None else list(range(len(sequences[i])))
                out[i] = hidden[row, rows]
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

        `forward(ids, mask)` runs on right-padded batches; each stream enters inference mode
        itself (it is thread-local).
        """
        if not sequences:
            return
        lengths = [len(s) for s in sequences]
        batches = self.plan(lengths)

        def run(positions: list[int]) -> np.ndarray:
            width = lengths[positions[0]]
            ids = torch.full((len(positions), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(positions), width), dtype=torch.long)
            for row, i in enumerate(positions):
                seq = sequences[i]
                ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
                mask[row, : len(seq)] = 1
            with torch.inference_mode():
                return forward(ids.to(self.device), mask.to(self.device)).cpu().numpy()

        bar = _progress(len(sequences), progress)
        with stream_map(min(self.streams, len(batches))) as run_all:
            for positions, result in zip(batches, run_all(run, batches)):
                yield positions, result
                bar.update(len(positions))
        bar.close()

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        need_layers = self.config.pooling == "last4"
        # A batch without padding needs no mask, which lets SDPA take its fused kernel.
        outputs = self.model(
            input_ids=ids,
            attention_mask=None if bool(mask.all()) else mask,
            token_type_ids=torch.zeros_like(ids),
            output_hidden_states=need_layers,
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


def _progress(total: int, mode: ProgressArg):
    return Progress(total, "encoding", "seq", mode)


@functools.lru_cache(maxsize=2)
def load_encoder(config: ModelConfig) -> Encoder:
    """An Encoder for this configuration, loaded once per process."""
    return Encoder(config)
