"""Prometheus text exposition -> typed samples. Pure: no Django, no I/O.

`prometheus_client.parser` is the authority on the grammar. Its family parser is slow (tens of
microseconds a line: 400k lines of a 5,000-node scrape would take ~20 s) and it gives up on the
whole text at the first bad line. So parsing here works line by line:

1. A strict fast path reads the canonical subset that exporters such as dcgm-exporter write:
   `name{label="value",...} value [timestamp]` with no escapes in label values. A label block is
   parsed once and shared by every line that repeats it (every field of one GPU does). A whole
   family whose lines list the same label sets as an earlier one, in the same order (a
   dcgm-exporter scrape lists its GPUs in the same order for every field), is converted and
   added column by column with C-level builtins instead of line by line.
2. Any line the fast path does not accept is handed, alone, to
   `prometheus_client.parser.text_string_to_metric_families`; what it accepts is kept.
3. What neither accepts is skipped and counted by reason; the rest of the scrape is kept.

The fast paths only accept lines on which all paths agree (tests/telemetry/test_parsing.py
checks this with generated lines and scrapes), so the result is the same as parsing every line
with `prometheus_client`, only faster.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

from prometheus_client.parser import parse_labels, text_string_to_metric_families

__all__ = [
    "ParseStats",
    "Sample",
    "SeriesGroup",
    "parse_exposition",
    "parse_grouped",
    "samples_from_vector",
]


class Sample(NamedTuple):
    """One sample. `labels` may be shared with other samples of the same parse: do not mutate."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None  # Unix seconds, when the exposition or the API gave one


@dataclass
class ParseStats:
    lines: int = 0  # every line read, blank and comment lines included
    samples: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)  # the first few skipped lines, for logs

    MAX_EXAMPLES = 5

    def skip(self, reason: str, line: str) -> None:
        self.skipped += 1
        self.skipped_reasons[reason] = self.skipped_reasons.get(reason, 0) + 1
        if len(self.examples) < self.MAX_EXAMPLES:
            self.examples.append(f"{reason}: {line[:200]}")

    def merge(self, other: ParseStats) -> None:
        self.lines += other.lines
        self.samples += other.samples
        self.skipped += other.skipped
        for reason, count in other.skipped_reasons.items():
            self.skipped_reasons[reason] = self.skipped_reasons.get(reason, 0) + count
        room = self.MAX_EXAMPLES - len(self.examples)
        self.examples.extend(other.examples[: max(room, 0)])


# Reasons a line is skipped (the keys of ParseStats.skipped_reasons).
INVALID_COMMENT = "invalid HELP/TYPE line"
INVALID_NAME = "invalid metric name"
INVALID_LABELS = "invalid labels"
INVALID_VALUE = "invalid value"
MALFORMED = "malformed line"
DUPLICATE = "duplicate series"

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_LABEL_BLOCK = re.compile(rf'(?:{_LABEL_NAME}="[^"\\]*"(?:,{_LABEL_NAME}="[^"\\]*")*,?)?')
_INT = re.compile(r"-?\d+")
# A whole line: `name{labels} value [timestamp]`, else anything (group 5) for the slow path.
_LINE = re.compile(
    r"^(?:([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} ([^\s_]+)(?: (-?[0-9]+))?|(.*))$", re.MULTILINE
)
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped", "info", "stateset"})


@dataclass(slots=True)
class SeriesGroup:
    """The samples of one parse that share a label set: metric name -> value."""

    labels: Mapping[str, str]
    values: dict[str, float] = field(default_factory=dict)
    timestamps: dict[str, float] | None = None  # metric name -> Unix seconds, where given

    def add(self, name: str, value: float, timestamp: float | None) -> None:
        self.values[name] = value
        if timestamp is not None:
            if self.timestamps is None:
                self.timestamps = {}
            self.timestamps[name] = timestamp


def parse_grouped(text: str, *, columnar: bool = True) -> tuple[list[SeriesGroup], ParseStats]:
    """Parse exposition text into samples grouped by label set; bad lines are skipped and counted.

    Every DCGM field of one GPU carries the same labels, so a scrape is a few label sets with
    many samples each: grouping here lets the caller read each label set once. A second sample
    of the same series (same name and labels) is skipped, as Prometheus rejects it.
    `columnar=False` turns off the whole-family fast path (_Parser.family), for tests.
    """
    stats = ParseStats()
    # One C-level regex pass splits every line: (name, label block, value, timestamp) for the
    # canonical ones, (..., other) for comments, blank and non-canonical lines.
    matches: list[_Match] = _LINE.findall(text)  # one per line, one more after a final newline
    stats.lines = len(matches) - (1 if not text or text.endswith("\n") else 0)
    parser = _Parser(stats)
    names = list(map(_NAME, matches))
    start, end = 0, len(matches)
    while start < end:
        if not names[start]:
            parser.other(matches[start][4])
            start += 1
            continue
        try:
            stop = names.index("", start)  # the run of sample lines ends at the next other line
        except ValueError:
            stop = end
        if not (columnar and parser.family(matches[start:stop], names[start:stop])):
            parser.lines(matches[start:stop])
        start = stop
    return parser.result()


_Match = tuple[str, str, str, str, str]  # name, label block, value, timestamp, other line
_NAME, _BLOCK, _VALUE, _STAMP = (itemgetter(i) for i in range(4))


class _Ref:
    """A sequence of label sets met as a whole family (every field of every GPU, in order),
    with the families waiting to be added to it column by column."""

    def __init__(self, blocks: list[str], values: list[dict[str, float]]) -> None:
        self.blocks = blocks
        self.values = values
        self.columns: list[tuple[str, list[float]]] = []

    def flush(self) -> None:
        if self.columns:
            names = [name for name, _ in self.columns]
            rows = zip(*(column for _, column in self.columns), strict=True)
            for values, row in zip(self.values, rows, strict=True):
                values.update(zip(names, row, strict=True))
            self.columns.clear()


class _Parser:
    MAX_REFS = 8

    def __init__(self, stats: ParseStats) -> None:
        self.stats = stats
        self.groups: dict[str, SeriesGroup | None] = {}  # label block -> group; None: invalid
        self.slow: dict[tuple[tuple[str, str], ...], SeriesGroup] = {}
        self.seen: set[str] = set()  # metric names met so far
        self.refs: list[_Ref] = []
        self.pending: set[str] = set()  # metric names of the columns not flushed yet

    def group(self, block: str) -> SeriesGroup | None:
        try:
            return self.groups[block]
        except KeyError:
            labels = _fast_labels(block)
            group = self.groups[block] = None if labels is None else SeriesGroup(labels)
            return group

    def family(self, rows: list[_Match], names: list[str]) -> bool:
        """The fast path for a run of lines that is one whole family: one metric name met for
        the first time, no timestamps, valid values, and label sets in an order met before (or
        all distinct). Checked and converted with C-level builtins; the values are added to
        their groups in columns, once per group. False: the run needs the line-by-line path."""
        name = names[0]
        if name in self.seen or names.count(name) != len(rows):
            return False
        if list(map(_STAMP, rows)).count("") != len(rows):
            return False
        try:
            column = list(map(float, map(_VALUE, rows)))
        except ValueError:
            return False
        blocks = list(map(_BLOCK, rows))
        ref = next((ref for ref in self.refs if ref.blocks == blocks), None)
        if ref is None:
            if len(self.refs) >= self.MAX_REFS or len(set(blocks)) != len(blocks):
                return False
            groups = [self.group(block) for block in blocks]
            values = [group.values for group in groups if group is not None]
            if len(values) != len(groups):
                return False
            ref = _Ref(blocks, values)
            self.refs.append(ref)
        ref.columns.append((name, column))
        self.seen.add(name)
        self.pending.add(name)
        return True

    def lines(self, rows: list[_Match]) -> None:
        """Line by line: sample lines the fast path did not take."""
        run_names = set(map(_NAME, rows))
        if not self.pending.isdisjoint(run_names):
            self.flush()  # so that a repeated series is seen as one
        self.seen.update(run_names)
        for name, block, text_value, timestamp, _ in rows:
            group = self.group(block)
            if group is not None:
                try:
                    value = float(text_value)
                except ValueError:
                    pass
                else:
                    if group.values.setdefault(name, value) is not value:
                        self.stats.skip(DUPLICATE, f"{name}{{{block}}} {text_value}")
                    elif timestamp:
                        group.add(name, value, int(timestamp) / 1000)
                    continue
            stamp = f" {timestamp}" if timestamp else ""
            self.slow_line(f"{name}{{{block}}} {text_value}{stamp}")

    def other(self, text: str) -> None:
        """A comment, a blank line, or a sample line outside the canonical subset."""
        line = text.strip()
        if not line:
            return
        if line[0] == "#":
            if not _comment_ok(line):
                self.stats.skip(INVALID_COMMENT, line)
            return
        self.slow_line(line)

    def slow_line(self, line: str) -> None:
        """This line alone, through prometheus_client."""
        result = _slow_sample(line)
        if isinstance(result, str):
            self.stats.skip(result, line)
            return
        key = tuple(sorted(result.labels.items()))
        group = self.slow.get(key)
        if group is None:
            group = self.slow[key] = SeriesGroup(result.labels)
        if result.name in group.values:
            self.stats.skip(DUPLICATE, line)
            return
        group.add(result.name, result.value, result.timestamp)

    def flush(self) -> None:
        for ref in self.refs:
            ref.flush()
        self.pending.clear()

    def result(self) -> tuple[list[SeriesGroup], ParseStats]:
        self.flush()
        found = [group for group in self.groups.values() if group is not None and group.values]
        found.extend(self.slow.values())
        self.stats.samples = sum(len(group.values) for group in found)
        return found, self.stats


def parse_exposition(text: str) -> tuple[list[Sample], ParseStats]:
    """Parse exposition text into samples (grouped by label set, in line order within a group).

    Malformed lines are skipped and counted in the stats, never fatal.
    """
    groups, stats = parse_grouped(text)
    samples = [
        Sample(name, group.labels, value, group.timestamps.get(name) if group.timestamps else None)
        for group in groups
        for name, value in group.values.items()
    ]
    return samples, stats


def _comment_ok(line: str) -> bool:
    """`# HELP name ...` and `# TYPE name type` must be well formed; other comments are free."""
    parts = line.split(None, 3)
    if len(parts) < 2 or parts[0] != "#" or parts[1] not in ("HELP", "TYPE"):
        return True
    if len(parts) < 3 or not _METRIC_NAME.fullmatch(parts[2]):
        return False
    return parts[1] == "HELP" or (len(parts) == 4 and parts[3].strip() in _TYPES)


def _fast_labels(block: str) -> Mapping[str, str] | None:
    """`a="1",b="2"` -> {"a": "1", "b": "2"}; None for what the slow path must judge."""
    if not block:
        return {}
    if not _LABEL_BLOCK.fullmatch(block):
        return None
    # Well formed and free of quotes and backslashes in values: splitting at the quotes gives
    # ['a=', '1', ',b=', '2', ''] (a trailing comma leaves ',' last): names, values alternate.
    parts = block.split('"')
    names = "".join(parts[0:-1:2])[:-1].split("=,")
    labels = dict(zip(names, parts[1::2], strict=True))
    if len(labels) != len(names) or "__name__" in labels:
        return None  # duplicate names and __name__ are for the slow path to judge
    return labels


def _slow_sample(line: str) -> Sample | str:
    """One line through prometheus_client; a str result is the reason it was refused."""
    try:
        families = list(text_string_to_metric_families(line))
    except Exception:  # any failure is this line's problem, not the scrape's
        return _reason(line)
    for family in families:
        for sample in family.samples:
            value = float(sample.value)
            timestamp = _timestamp_seconds(sample.timestamp)
            return Sample(sample.name, dict(sample.labels), value, timestamp)
    return MALFORMED


def _timestamp_seconds(timestamp: object) -> float | None:
    if timestamp is None:
        return None
    if isinstance(timestamp, int | float):
        return float(timestamp)
    # prometheus_client's OpenMetrics Timestamp type
    sec = getattr(timestamp, "sec", None)
    nsec = getattr(timestamp, "nsec", 0)
    if isinstance(sec, int) and isinstance(nsec, int):
        return sec + nsec / 1e9
    return None


def _reason(line: str) -> str:
    """Why prometheus_client refused `line` (its messages are not meant to be parsed)."""
    brace = line.find("{")
    name = line[:brace] if brace >= 0 else (line.split(None, 1) or [""])[0]
    if brace != 0 and not _METRIC_NAME.fullmatch(name.strip()):
        return INVALID_NAME
    if brace >= 0:
        close = line.rfind("}")
        if close < brace:
            return INVALID_LABELS
        try:
            parse_labels(line[brace + 1 : close])
        except ValueError:
            return INVALID_LABELS
    return INVALID_VALUE


def samples_from_vector(
    result: Iterable[Mapping[str, Any]], *, name: str | None = None
) -> tuple[list[Sample], ParseStats]:
    """Samples from the `result` list of a Prometheus instant-vector query.

    Each item is `{"metric": {labels}, "value": [unix_seconds, "value as a string"]}`
    (wire-formats.md §2). Aggregations and `*_over_time` functions drop `__name__`: pass `name`
    to give those samples the name of the field that was queried.
    """
    stats = ParseStats()
    samples: list[Sample] = []
    for item in result:
        stats.lines += 1
        try:
            metric = item["metric"]
            timestamp, text = item["value"]
            labels = {str(k): str(v) for k, v in metric.items() if k != "__name__"}
            sample_name = str(metric.get("__name__") or name or "")
            value = float(text)
            ts = float(timestamp)
        except (KeyError, TypeError, ValueError):
            stats.skip(MALFORMED, repr(item))
            continue
        if not sample_name:
            stats.skip(INVALID_NAME, repr(item))
            continue
        if math.isinf(ts) or math.isnan(ts):
            stats.skip(INVALID_VALUE, repr(item))
            continue
        samples.append(Sample(sample_name, labels, value, ts))
    stats.samples = len(samples)
    return samples, stats
