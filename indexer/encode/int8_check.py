"""int8 check records: whether an int8 variant of a model passed the quality gates, per ISA class.

`dtype: auto` picks int8 only where a record says the model's int8 variant passed every gate
on this CPU's ISA class (`indexer.core.machine.isa_class`; FBGEMM's int8 kernels round differently
with and without VNNI, so a pass on one class says nothing about another) and ran faster than
the path `auto` takes otherwise. A record is looked up, by the model's weights hash, first in
`bertindex-int8-check.json` beside the model, then in the records shipped with bertindex
(`indexer/encode/int8_checks.json`, written by `benchmarks/int8_gates.py --record`).

Record layout::

    {"weights_hash": "...", "model_name": "...", "variant": "keep-ffn-out",
     "classes": {"avx512-bf16": {"passed": true, "speed": {"fp32": 1.0, "bf16": 2.4, "int8": 1.5},
                                 "gates": {...}, "emulated": false, "recorded": "2026-12-01"}}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CHECK_FILE = "bertindex-int8-check.json"
PACKAGED = Path(__file__).with_name("int8_checks.json")
MARGIN = 1.1  # int8 must have run this many times as fast as the path `auto` takes otherwise


@dataclass(frozen=True)
class Verdict:
    passed: bool
    why: str
    variant: str | None = None
    speed: dict | None = None

    def faster_than(self, dtype: str) -> bool:
        """int8 ran at least `MARGIN` faster than `dtype` in the recorded check (a smaller gain
        is within what a shared machine's noise and int8's calibration at load eat)."""
        speed = self.speed or {}
        return bool(
            speed.get("int8") and speed.get(dtype) and speed["int8"] >= speed[dtype] * MARGIN
        )


def _records(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else [data]


def find(model_dir: Path) -> dict | None:
    """The int8 check record for this model's weights, or None."""
    from indexer.encode.encoder import weights_hash

    try:
        digest = weights_hash(Path(model_dir))
    except Exception:  # noqa: BLE001 - no weights, no record; the loader reports the real error
        return None
    for path in (Path(model_dir) / CHECK_FILE, PACKAGED):
        for record in _records(path):
            if record.get("weights_hash") == digest:
                return record
    return None


def verdict(record: dict | None, isa_class: str) -> Verdict:
    """Whether `record` lets int8 run on a CPU of this ISA class, and why (one line)."""
    if record is None:
        return Verdict(False, "no int8 check recorded for this model")
    entry = (record.get("classes") or {}).get(isa_class)
    variant = record.get("variant")
    if entry is None:
        known = ", ".join(sorted(record.get("classes") or {})) or "none"
        return Verdict(
            False, f"no int8 check recorded for ISA class {isa_class} (recorded: {known})", variant
        )
    if not entry.get("passed"):
        failed = [k for k, g in (entry.get("gates") or {}).items() if not g.get("passed")]
        return Verdict(
            False,
            f"int8 check failed on {isa_class} ({', '.join(failed) or 'gates'})",
            variant,
            entry.get("speed"),
        )
    return Verdict(
        True,
        f"int8 check ({variant}) passed on {isa_class}"
        + (" (emulated)" if entry.get("emulated") else ""),
        variant,
        entry.get("speed"),
    )


def write(path: Path, record: dict) -> None:
    """Add `record` to the JSON list at `path`: its ISA classes join those already recorded for
    the same weights and variant; a record of another variant replaces the old one."""
    records, merged = [], dict(record)
    for old in _records(path):
        if old.get("weights_hash") != record["weights_hash"]:
            records.append(old)
        elif old.get("variant") == record.get("variant"):
            merged["classes"] = {**old.get("classes", {}), **record.get("classes", {})}
    path.write_text(json.dumps([*records, merged], indent=1, sort_keys=True) + "\n")
