"""The config sections of the flows: the sources an index schedule reads (`sources:`), the
schedules (`schedules:`: cron or interval, or after each annotate run) and the Dask cluster
(`runner: dask`, `dask:` and its TLS settings). Checked when the config is loaded."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from indexer.config.strict import Strict
from indexer.ingest.formats import format_names


class FieldsConfig(Strict):
    """Which columns of a source hold the id, text and title; every other column is metadata."""

    id: str | None = Field(None, description="id column (default: `id` or `_id`)")
    text: str = Field("text", description="text column")
    title: str | None = Field(
        "title", description="title column, encoded before the text; null: no title"
    )
    metadata: list[str] | None = Field(None, description="metadata columns (default: all others)")


class SourceConfig(Strict):
    """A corpus indexed by the scheduled `index_corpus` flow (`bertindex flows serve`)."""

    paths: list[str] = Field(min_length=1, description="files or directories")
    collection: str = Field("default", description="collection the documents are indexed into")
    format: str = Field(
        "auto", description="`auto` (by file name) or a registered format (indexer.ingest.formats)"
    )
    fields: FieldsConfig = FieldsConfig()
    on_missing: Literal["keep", "delete"] = Field(
        "keep",
        description="documents of the collection absent from the source's files: "
        "keep them, or delete them from the store and the index",
    )
    batch_size: int = Field(2048, ge=1, description="documents read and committed per batch")
    strict: bool = Field(
        False,
        description="a batch with any rejected record is not committed "
        "and the run fails (as `bertindex index --strict`)",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in format_names():
            raise ValueError(f"unknown format '{value}'; choose one of {', '.join(format_names())}")
        return value


AFTER_ANNOTATE = ("report",)  # schedules entries that run after each annotate run, untimed


class ScheduleConfig(Strict):
    """When a flow runs: exactly one of `cron` (5 fields) or `interval` (seconds)."""

    cron: str | None = Field(None, description="5-field cron expression, e.g. `*/30 * * * *`")
    interval: int | None = Field(None, ge=1, description="seconds between runs")
    timezone: str = Field("UTC", description="time zone of the cron expression")
    active: bool = Field(True, description="false: the deployment is registered, paused")
    sources: list[str] | None = Field(
        None, description="index_corpus only: the sources to index (default: all)"
    )
    heads: list[str] | None = Field(
        None,
        description="annotate: head directories, `DIR` or `NAME=DIR` (as --heads); "
        "report: head names whose labels are shown (default: all)",
    )
    inbox: str | None = Field(
        None,
        description="annotate only: the folder whose new files are indexed and annotated "
        "(as --inbox); unset: annotate the stored documents that miss a head",
    )
    collection: str | None = Field(
        None,
        description="annotate and report: the collection (annotate inbox: default "
        "'default'; otherwise default all)",
    )

    folder: str | None = Field(
        None,
        description="report only: the folder `report.html` and `report.json` are written "
        "to after each annotate run",
    )
    by: str | None = Field(
        None,
        description="report only: bucket by `day`, `week` (the "
        "default), `month` or a metadata field (as --by)",
    )

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleConfig:
        if self.cron is not None and self.interval is not None:
            raise ValueError(
                "give exactly one of 'cron' (e.g. '0 * * * *') and 'interval' (seconds)"
            )
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


class DaskSecurityConfig(Strict):
    """TLS between this process, the scheduler and the workers: passed to `distributed`'s
    `Security` (docs/guides/dask.md). Unset: plain TCP, so bind the scheduler to a private
    interface or loopback."""

    tls_ca_file: str | None = Field(
        None,
        description="CA certificate (PEM) the scheduler's and workers' certificates are signed by",
    )
    tls_client_cert: str | None = Field(None, description="this client's certificate (PEM)")
    tls_client_key: str | None = Field(
        None, description="this client's private key (PEM; may be in tls_client_cert)"
    )
    require_encryption: bool = Field(False, description="refuse any connection that is not TLS")

    def security_kwargs(self) -> dict:
        """Keyword arguments of `distributed.security.Security` (empty: no TLS configured)."""
        return {k: v for k, v in self.model_dump().items() if v not in (None, False)}

    @model_validator(mode="after")
    def _cert_with_ca(self) -> DaskSecurityConfig:
        if (self.tls_client_cert or self.require_encryption) and not self.tls_ca_file:
            raise ValueError(
                "dask.security: tls_client_cert and require_encryption need "
                "tls_ca_file (the CA the cluster's certificates are signed by)"
            )
        return self


class DaskConfig(Strict):
    """The Dask cluster that encodes index partitions and runs the heads of `annotate` when
    `runner: dask` (the flow process stays the only writer; docs/guides/dask.md)."""

    address: str | None = Field(
        None,
        description="scheduler address, e.g. tcp://10.0.0.5:8786 or tls://10.0.0.5:8786 "
        "with `security` (None: a LocalCluster on this machine, bound to 127.0.0.1)",
    )
    in_flight: int = Field(4, ge=1, description="batches encoding at once, ahead of the writer")
    vectors: Literal["auto", "files", "send"] = Field(
        "auto",
        description="how workers hand their partitions' vectors to the writer: 'files' (each "
        "writes them into the store's folder, which the writer only records), 'send' (back "
        "over the network, the writer stores them), 'auto' (files when every worker sees the "
        "store's folder at the writer's path, else send)",
    )
    security: DaskSecurityConfig = DaskSecurityConfig()

    @model_validator(mode="after")
    def _tls_address_has_certs(self) -> DaskConfig:
        if self.address and self.address.startswith("tls://") and not self.security.tls_ca_file:
            raise ValueError(
                f"dask.address {self.address}: a tls:// scheduler needs "
                "dask.security.tls_ca_file, tls_client_cert and tls_client_key"
            )
        return self


def check_schedule(flow_name: str, schedule: ScheduleConfig) -> None:
    """One entry of `schedules:`: timed or run after annotate, and only the keys its flow
    takes."""
    timed = schedule.cron is not None or schedule.interval is not None
    if flow_name in AFTER_ANNOTATE:
        if timed:
            raise ValueError(
                f"schedules.{flow_name} runs after each annotate run: remove 'cron'/'interval'"
            )
        if not schedule.folder:
            raise ValueError(
                f"schedules.{flow_name} needs 'folder:' (where "
                "report.html and report.json are written)"
            )
    elif not timed:
        raise ValueError(
            f"schedules.{flow_name}: give exactly one of 'cron' (e.g. "
            "'0 * * * *') and 'interval' (seconds)"
        )
    else:
        for key in ("folder", "by"):
            if getattr(schedule, key) is not None:
                raise ValueError(f"schedules.{flow_name}.{key}: only report takes {key}")
    if schedule.sources is not None and flow_name != "index_corpus":
        raise ValueError(f"schedules.{flow_name}.sources: only index_corpus takes sources")
    for key in ("heads", "inbox", "collection"):
        takes = ("annotate", "report") if key != "inbox" else ("annotate",)
        if getattr(schedule, key) is not None and flow_name not in takes:
            raise ValueError(f"schedules.{flow_name}.{key}: only {' and '.join(takes)} take {key}")
