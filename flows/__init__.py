"""Prefect flows over the `indexer` library. Importing this package applies bertindex's
Prefect settings (no telemetry; quiet logs) before Prefect itself is imported.
"""

import os

# Offline machines: Prefect's analytics would try a DNS look-up that fails.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
# Our CLI reports errors itself; set PREFECT_LOGGING_LEVEL=INFO to see Prefect's run logs.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
