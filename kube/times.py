"""Timestamps in the two formats the Kubernetes API accepts.

`metav1.MicroTime` (Event.eventTime, Lease acquireTime/renewTime) is parsed with the layout
`2006-01-02T15:04:05.000000Z07:00`: exactly six fractional digits and a zone. The `kubernetes`
client turns every datetime it sends into `datetime.isoformat()`, which drops the fraction when
`microsecond == 0` and rejects naive datetimes, and its pydantic models turn a pre-formatted string
back into a datetime before sending. `MicroTime` is a datetime whose `isoformat()` always prints the
API server's layout, so it survives both. `metav1.Time` (condition times) is RFC 3339 to the
second.
"""

from __future__ import annotations

from datetime import UTC, datetime


class MicroTime(datetime):
    """A UTC datetime that serializes as `YYYY-MM-DDTHH:MM:SS.ffffffZ` whatever its microseconds."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return self.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def __str__(self) -> str:
        return self.isoformat()


def micro_time(moment: datetime) -> MicroTime:
    """`moment` (aware) as a MicroTime; a naive datetime is refused rather than guessed."""
    if moment.tzinfo is None:
        raise ValueError("MicroTime needs an aware datetime")
    utc = moment.astimezone(UTC)
    return MicroTime(
        utc.year,
        utc.month,
        utc.day,
        utc.hour,
        utc.minute,
        utc.second,
        utc.microsecond,
        tzinfo=UTC,
    )


def rfc3339(moment: datetime) -> str:
    """metav1.Time: seconds precision, UTC, `Z`."""
    if moment.tzinfo is None:
        raise ValueError("metav1.Time needs an aware datetime")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> datetime | None:
    """A Time or MicroTime from the API (string, or a datetime the client already parsed)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
