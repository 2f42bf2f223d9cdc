"""The trends report as data: documents per bucket (day, week, month of a time field, or the
values of a metadata field), per head the label counts, shares and mean scores, top entities
per type with their change against the previous bucket, rising entities, the largest
near-duplicate waves; score histograms per head and label. Documents without a readable time
(or value) are counted in the `unknown` bucket, never dropped.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from indexer.config import Config
from indexer.config.flows import ScheduleConfig
from indexer.core.timeutil import parse_utc, utc_now
from indexer.errors import ConfigError, InputError
from indexer.store import TIME_UNITS, UNKNOWN, Store


def parse_time(value: str | None, option: str) -> datetime | None:
    """An ISO 8601 date or time (any UTC offset) as naive UTC; None stays None.

    Raises:
        InputError: naming the option and the expected form.
    """
    if value is None:
        return None
    try:
        return parse_utc(value)
    except ValueError:
        raise InputError(
            f"{option} '{value}' is not an ISO 8601 date or time "
            "(e.g. 2024-05-01 or 2024-05-01T12:00:00Z)"
        ) from None


def build_report(
    store: Store,
    config: Config,
    collection: str | None = None,
    heads: list[str] | None = None,
    by: str = "week",
    time_field: str | None = None,
    since: str | None = None,
    until: str | None = None,
    top: int = 5,
    rising: int = 10,
    waves: int = 3,
    bins: int = 10,
) -> dict:
    """The report of one store (or one collection of it).

    Args:
        store: an open store (read-only is enough).
        config: `fields.time` (default time field), `dedup.min_size` (what counts as a wave).
        collection: one collection, or None for all.
        heads: only these heads' labels (None: every head).
        by: `day`, `week`, `month`, or a metadata field to group by.
        time_field: overrides `fields.time`.
        since, until: ISO dates: time buckets only, since <= time < until.
        top, rising, waves, bins: list lengths and histogram bins.
    Returns:
        {"collection", "by", "time_field", "generated_at", "documents", "buckets": [one dict
        per bucket, in order, `unknown` last], "histograms": {head: {label: [count per bin]}},
        "bins"}.
    Raises:
        InputError: a time bucket with no time field, a field no document has, a bad date.
    """
    timed = by in TIME_UNITS
    time_field = time_field or config.fields.time
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    _check_request(store, collection, by, timed, time_field, start, end)
    with store.trends.bucketed(collection, by, time_field if timed else None, start, end) as counts:
        names = sorted(
            (b for b in counts if b != UNKNOWN),
            key=(lambda b: b) if timed else (lambda b: (-counts[b], b)),
        )
        if UNKNOWN in counts:
            names.append(UNKNOWN)
        order = [(b, counts[b]) for b in names]
        agg = store.trends.aggregates(
            order,
            timed,
            heads,
            top=top,
            rising=rising,
            waves=waves,
            min_size=config.dedup.min_size,
            bins=bins,
        )
    buckets: dict[str, dict[str, Any]] = {
        b: {"bucket": b, "documents": n, "heads": {}, "entities": {}, "rising": [], "waves": []}
        for b, n in order
    }
    _add_labels(buckets, agg["labels"])
    _add_entities(buckets, order, agg["entities"], timed, rising)
    for bucket, group_id, n, size, text in agg["waves"]:
        buckets[bucket]["waves"].append(
            {"group_id": group_id, "in_bucket": n, "size": size, "representative": text}
        )
    histograms: dict[str, dict[str, list[int]]] = {}
    for head, label, bin_, count in agg["histogram"]:
        histograms.setdefault(head, {}).setdefault(label, [0] * bins)[bin_] = count
    return {
        "collection": collection,
        "by": by,
        "time_field": time_field if timed else None,
        "since": since,
        "until": until,
        "generated_at": utc_now().isoformat(timespec="seconds"),
        "documents": sum(counts.values()),
        "buckets": list(buckets.values()),
        "histograms": histograms,
        "bins": bins,
    }


def _check_request(
    store: Store, collection: str | None, by: str, timed: bool, time_field: str | None, start, end
) -> None:
    """Refuse a report that cannot be made, naming the option to change."""
    where = f"collection '{collection}'" if collection else "the store"
    field = by  # the metadata field the buckets come from
    if timed:
        if not time_field:
            raise InputError(
                f"--by {by} needs the metadata field holding each document's "
                "time: pass --time-field FIELD or set fields.time in config.yaml"
            )
        field = time_field
    if not timed and (start or end):
        raise InputError(f"--since/--until need time buckets (--by day|week|month), not --by {by}")
    if store.counts.documents(collection) == 0:
        raise InputError(f"{where} has no documents; index some first")
    if store.trends.documents_with_field(field, collection) == 0:
        option = "--time-field" if timed else "--by"
        raise InputError(
            f"no document in {where} has the metadata field '{field}' ({option}); "
            "give a field your documents carry (see `bertindex search --json`, "
            "`metadata`)"
        )


def _add_labels(buckets: dict, rows) -> None:
    """Per bucket and head: documents, mean score, and each label's count, mean and share."""
    for bucket, head, label, count, mean in rows:
        h = buckets[bucket]["heads"].setdefault(
            head, {"documents": 0, "score_sum": 0.0, "labels": {}}
        )
        h["documents"] += count
        h["score_sum"] += mean * count
        h["labels"][label] = {"count": count, "mean_score": round(mean, 4)}
    for b in buckets.values():
        for h in b["heads"].values():
            total = h.pop("score_sum")
            h["mean_score"] = round(total / h["documents"], 4) if h["documents"] else None
            for lab in h["labels"].values():
                lab["share"] = round(lab["count"] / h["documents"], 4)


def _add_entities(buckets: dict, order: list, rows, timed: bool, rising: int) -> None:
    """Per bucket: the top entities of each type (with the change from the bucket before,
    time buckets only) and the `rising` entities whose share grew the most."""
    for ord_, etype, text, n, share, prev_n, prev_share, has_prev, is_top, is_rising in rows:
        b = buckets[order[ord_][0]]
        comparable = timed and has_prev and order[ord_][0] != UNKNOWN
        if is_top:
            b["entities"].setdefault(etype, []).append(
                {"text": text, "count": n, "change": n - prev_n if comparable else None}
            )
        if is_rising and comparable:
            b["rising"].append(
                {
                    "type": etype,
                    "text": text,
                    "count": n,
                    "share": round(share, 4),
                    "share_change": round(share - prev_share, 4),
                }
            )
    for b in buckets.values():
        b["rising"].sort(key=lambda r: (-r["share_change"], -r["count"], r["text"]))
        b["rising"] = b["rising"][:rising]


def write_report_files(report: dict, folder: Path) -> dict:
    """Write `report.json` and `report.html` into `folder` (each replaced atomically).

    Returns:
        {"json": path, "html": path}.
    """
    import json

    from indexer.report.html import render_html

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in (
        ("report.json", json.dumps(report, ensure_ascii=False, default=str)),
        ("report.html", render_html(report)),
    ):
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(folder / name)
        out[name.split(".")[1]] = str(folder / name)
    return out


def write_scheduled_report(config: Config) -> dict | None:
    """The `schedules.report` entry: write report.json and report.html to its folder and log
    the run (kind `report`, shown by `bertindex status`). Called after each annotate run.

    Returns:
        {"json", "html", "buckets"}, or None when no report is scheduled.
    """
    schedule = config.schedules.get("report")
    if schedule is None:
        return None
    with Store(Path(config.store.path)) as store, store.runs.recorded_run("report") as run:
        report = build_report(
            store, config, schedule.collection, schedule.heads, schedule.by or "week"
        )
        files = write_report_files(report, _report_folder(schedule))
        run.summary = files | {"buckets": len(report["buckets"])}
    return run.summary


def _report_folder(schedule: ScheduleConfig) -> Path:
    """Where a scheduled report is written (the configuration requires a report's `folder`)."""
    if not schedule.folder:
        raise ConfigError(
            "schedules.report needs 'folder:' (where report.html and report.json are written)"
        )
    return Path(schedule.folder).expanduser()
