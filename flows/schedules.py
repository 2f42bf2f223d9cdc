"""Schedules from config.yaml as Prefect deployments, served in process by `bertindex flows
serve`: `index_corpus` over the configured sources, `annotate` over the inbox (or the store),
`reindex`. Scheduled runs re-read the config file, so edits apply from the next run (the
sources, heads, inbox and collection named in a schedule are its deployment's parameters:
those apply once `flows serve` restarts).

`plan_deployments` describes them (next run times included) without importing Prefect's
server; `build_deployments` makes the Prefect deployments; `serve_deployments` runs them.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from prefect import flow

import flows  # noqa: F401  (Prefect settings first)
from indexer.config import Config, load_config
from indexer.config.flows import ScheduleConfig

log = logging.getLogger(__name__)

# Interval schedules count from this instant, so their run times do not depend on when
# `flows serve` started (and `flows list` can tell them without asking the server).
ANCHOR = datetime(2024, 1, 1, tzinfo=timezone.utc)
# schedule key -> (module, flow attribute) of the flow a deployment runs
FLOWS = {
    "index_corpus": ("flows.schedules", "index_sources"),
    "annotate": ("flows.annotate", "annotate_scheduled"),
    "reindex": ("flows.schedules", "reindex_store"),
}


def _config(config_path: str | None, store_path: str) -> Config:
    return load_config(config_path).with_overrides(**{"store.path": store_path})


@flow(name="index_sources", log_prints=False)
def index_sources(
    config_path: str | None, store_path: str, sources: list[str] | None = None
) -> dict:
    """Scheduled `index_corpus`: index each configured source (all, or the named ones) in turn.

    Returns:
        source name -> run summary.
    """
    from flows.index_corpus import index_source

    config = _config(config_path, store_path)
    names = sources or list(config.sources)
    unknown = [n for n in names if n not in config.sources]
    if unknown:
        raise ValueError(f"sources {', '.join(unknown)} are no longer in {config_path}")
    return {name: index_source(config, config.sources[name]) for name in names}


@flow(name="reindex_store", log_prints=False)
def reindex_store(config_path: str | None, store_path: str) -> dict:
    """Scheduled `reindex`: re-encode on an encoder change, else rebuild the index."""
    from flows.reindex import reindex

    return reindex(_config(config_path, store_path))


@dataclass
class DeploymentPlan:
    """One configured schedule: what it runs, when, or why it is skipped."""

    name: str
    flow: str
    trigger: str
    active: bool
    parameters: dict
    next_runs: list[datetime] = field(default_factory=list)
    skipped: str | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["next_runs"] = [t.isoformat() for t in self.next_runs]
        return out


def next_run_times(schedule: ScheduleConfig, count: int, after: datetime) -> list[datetime]:
    """The next `count` run times after `after` (aware datetimes in the schedule's zone)."""
    zone = ZoneInfo(schedule.timezone)
    after = after.astimezone(zone)
    if schedule.interval is not None:
        step = timedelta(seconds=schedule.interval)
        passed = (after - ANCHOR) // step + 1
        return [(ANCHOR + (passed + i) * step).astimezone(zone) for i in range(count)]
    from cronsim import CronSim

    times = CronSim(schedule.cron, after.replace(tzinfo=None, microsecond=0))
    return [next(times).replace(tzinfo=zone) for _ in range(count)]


def _flow_available(key: str) -> str | None:
    """None when the flow behind a schedule key can be imported, else the reason."""
    module, attr = FLOWS[key]
    try:
        found = getattr(importlib.import_module(module), attr, None)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        found = None
    if found is None:
        return (
            f"the {key} flow is not part of this bertindex ({module}.{attr}(config_path, "
            "store_path) missing); the schedule is valid and will run once that flow exists"
        )
    return None


def _absolute_head(arg: str) -> str:
    """A `--heads` argument with its directory made absolute (`NAME=DIR` keeps its name), as
    `indexer.annotate.annotator.parse_head_arg` reads it, so that a served run finds the head from
    any
    working directory."""
    name, sep, path = arg.partition("=")
    if sep and name and not Path(arg).exists():
        return f"{name}={Path(path).expanduser().resolve()}"
    return str(Path(arg).expanduser().resolve())


def plan_deployments(
    config: Config, config_path: str | None, next_runs: int = 3, now: datetime | None = None
) -> list[DeploymentPlan]:
    """The deployments `flows serve` registers for `config.schedules`, in a stable order."""
    now = now or datetime.now(timezone.utc)
    store_path = str(Path(config.store.path).resolve())
    plans = []
    for key in ("index_corpus", "annotate", "reindex"):
        schedule = config.schedules.get(key)
        if schedule is None:
            continue
        parameters: dict = {"config_path": config_path, "store_path": store_path}
        if key == "index_corpus":
            parameters["sources"] = schedule.sources
        if key == "annotate":
            parameters |= {
                "heads": [_absolute_head(h) for h in schedule.heads or []],
                "inbox": str(Path(schedule.inbox).expanduser().resolve())
                if schedule.inbox
                else None,
                "collection": schedule.collection,
            }
        attr = FLOWS[key][1]
        trigger = f"cron {schedule.cron}" if schedule.cron else f"every {schedule.interval}s"
        if schedule.timezone != "UTC":
            trigger += f" ({schedule.timezone})"
        skipped = _flow_available(key)
        plans.append(
            DeploymentPlan(
                name=key,
                flow=attr,
                trigger=trigger,
                active=schedule.active,
                parameters=parameters,
                skipped=skipped,
                next_runs=[]
                if skipped or not schedule.active
                else next_run_times(schedule, next_runs, now),
            )
        )
    return plans


def build_deployments(config: Config, config_path: str | None):
    """Prefect deployments for the configured schedules.

    Returns:
        (deployments, [(schedule key, reason skipped)]).
    """
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron, Interval

    deployments, skipped = [], []
    for plan in plan_deployments(config, config_path, next_runs=0):
        if plan.skipped:
            log.warning("schedule %s skipped: %s", plan.name, plan.skipped)
            skipped.append((plan.name, plan.skipped))
            continue
        schedule = config.schedules[plan.name]
        module, attr = FLOWS[plan.name]
        target = getattr(importlib.import_module(module), attr)
        if schedule.cron:
            when = Cron(schedule.cron, timezone=schedule.timezone, active=schedule.active)
        else:
            when = Interval(
                timedelta(seconds=schedule.interval),
                anchor_date=ANCHOR,
                timezone=schedule.timezone,
                active=schedule.active,
            )
        deployments.append(
            target.to_deployment(
                name=plan.name,
                schedule=when,
                parameters=plan.parameters,
                entrypoint_type=EntrypointType.MODULE_PATH,
                description=f"bertindex schedule `{plan.name}` from {config_path or 'defaults'}",
                tags=["bertindex"],
            )
        )
    return deployments, skipped


def serve_deployments(deployments, limit: int = 1) -> None:
    """Register the deployments and run their scheduled flow runs until interrupted."""
    from prefect import serve

    serve(*deployments, limit=limit, print_starting_message=True)
