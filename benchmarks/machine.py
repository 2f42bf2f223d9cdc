"""Where a benchmark ran: CPU model and AVX-512 flags, cores, load average, date and commit,
written beside every figure so that it can be read against the machine it came from."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    """{"cpu", "avx512", "cores", "load_average", "date", "commit"} of this run."""
    cpu, flags = "unknown", []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = sorted({f for f in line.split(":", 1)[1].split() if "avx512" in f})
                break
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=False,
                            capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "avx512": flags, "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit}
