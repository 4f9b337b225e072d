"""Log formats beyond the stdlib's: JSON lines for log shippers (GPUSCHED_LOG_FORMAT=json).

One JSON object per line: ts (UTC, ISO 8601, milliseconds), level, logger, message, process, then
every `extra={...}` field of the call as its own key, and `exc` / `stack` when present. Values
JSON cannot hold (a request object, a datetime) are written as their str().
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# Every attribute a LogRecord has without `extra` (a blank record has them all, on any Python).
_RECORD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        entry.update(
            (key, value) for key, value in record.__dict__.items() if key not in _RECORD_ATTRIBUTES
        )
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)
