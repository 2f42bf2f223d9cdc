"""Times as the store keeps them: naive UTC (`utc_now`), read from ISO 8601 (`parse_utc`)."""

from __future__ import annotations

from datetime import datetime, timezone


def parse_utc(value: str) -> datetime:
    """An ISO 8601 date or time (a trailing Z or any UTC offset; none means UTC) as naive UTC.

    Raises:
        ValueError: `value` is not ISO 8601 (callers name the option or field).
    """
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(timezone.utc).replace(tzinfo=None)
    return parsed


def utc_now() -> datetime:
    """Now in naive UTC, as the store keeps times."""
    return datetime.now(timezone.utc).replace(tzinfo=None)
