"""Prometheus text exposition -> typed samples. Pure: no Django, no I/O.

`prometheus_client.parser` is the authority on the grammar. Its family parser is slow (tens of
microseconds a line: 400k lines of a 5,000-node scrape would take ~20 s) and it gives up on the
whole text at the first bad line. So parsing here works line by line:

1. A strict fast path reads the canonical subset that exporters such as dcgm-exporter write:
   `name{label="value",...} value [timestamp]` with no escapes in label values. A label block is
   parsed once and shared by every line that repeats it (every field of one GPU does). A whole
   family (a run of lines between comment lines, in an exporter's output) whose lines list the
   same label sets as an earlier one, in the same order (a dcgm-exporter scrape lists its GPUs
   in the same order for every field), is checked, converted and added column by column with a
   few C-level passes over its text instead of line by line; any other run is split into lines
   by one regex pass.
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from operator import add, getitem, itemgetter
from typing import Any, NamedTuple

from prometheus_client.parser import parse_labels, text_string_to_metric_families

__all__ = [
    "SERIES_CAP",
    "ColumnBlock",
    "ParseStats",
    "Scrape",
    "Sample",
    "SeriesGroup",
    "parse_exposition",
    "parse_grouped",
    "parse_scrape",
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

    def skip(self, reason: str, line: str, count: int = 1) -> None:
        self.skipped += count
        self.skipped_reasons[reason] = self.skipped_reasons.get(reason, 0) + count
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
SERIES_CAP = "over the series cap"

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


def parse_scrape(text: str, *, columnar: bool = True, max_series: int | None = None) -> Scrape:
    """Parse exposition text into whole families as columns and the other samples grouped by
    label set; bad lines are skipped and counted.

    Every DCGM field of one GPU carries the same labels, so a scrape is a few label sets with
    many samples each: grouping here lets the caller read each label set once. A second sample
    of the same series (same name and labels) is skipped, as Prometheus rejects it.
    `columnar=False` turns off the whole-family path (_Parser.family): no columns, for tests.
    Past `max_series` sample lines the text is not read: those lines are counted (SERIES_CAP).
    """
    stats = ParseStats()
    if max_series is not None:
        text, beyond = _first_series(text, max_series)
        if beyond:
            stats.skip(SERIES_CAP, f"{beyond} lines past the first {max_series} series", beyond)
    parser = _Parser(stats)
    for other, run in _runs(text):
        if other:
            stats.lines += 1
            parser.other(run)
            continue
        lines = run.split("\n")
        stats.lines += len(lines)
        if not (columnar and parser.family_text(run, lines)):
            _lines(parser, run, columnar=columnar)
    return parser.result()


def parse_grouped(
    text: str, *, columnar: bool = True, max_series: int | None = None
) -> tuple[list[SeriesGroup], ParseStats]:
    """parse_scrape() with every sample grouped by label set (the columns added to their
    groups): for readers of label sets one by one."""
    scrape = parse_scrape(text, columnar=columnar, max_series=max_series)
    by_labels: dict[int, SeriesGroup] = {id(group.labels): group for group in scrape.groups}
    for block in scrape.columns:
        names = list(block.columns)
        rows = zip(*block.columns.values(), strict=True)
        for labels, row in zip(block.labels, rows, strict=True):
            group = by_labels.get(id(labels))
            if group is None:
                group = by_labels[id(labels)] = SeriesGroup(labels)
                scrape.groups.append(group)
            group.values.update(zip(names, row, strict=True))
    return scrape.groups, scrape.stats


def _runs(text: str) -> Iterator[tuple[bool, str]]:
    """The text as (True, line) for each comment or blank line that starts a stretch, and
    (False, run) for each run of lines up to the next comment line (a family, in an exporter's
    output), found by C-level searches for "#". A blank line inside a run stays in it (the run is
    then read line by line)."""
    pos, size = 0, len(text)
    while pos < size:
        if text[pos] in "#\n":
            end = text.find("\n", pos)
            end = size if end < 0 else end
            yield True, text[pos:end]
            pos = end + 1
            continue
        stop = text.find("#", pos)
        while stop > 0 and text[stop - 1] != "\n":  # a "#" inside a line
            stop = text.find("#", stop + 1)
        stop = size if stop < 0 else stop
        yield False, text[pos : stop - 1 if text[stop - 1] == "\n" else stop]
        pos = stop


def _lines(parser: _Parser, run: str, *, columnar: bool) -> None:
    """A run line by line: one C-level regex pass splits it into (name, label block, value,
    timestamp) for the canonical lines, (..., other) for the rest; runs of canonical lines of
    one name still take the whole-family path when they can."""
    matches: list[_Match] = _LINE.findall(run)
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


_SAMPLE_LINE = re.compile(r"^[ \t]*[^#\s].*$", re.MULTILINE)


def _first_series(text: str, max_series: int) -> tuple[str, int]:
    """The text up to its `max_series`-th sample line (not a comment, not blank), and how many
    sample lines come after it. A text with no more lines than that is taken whole at once."""
    if text.count("\n") < max_series:
        return text, 0
    matches = _SAMPLE_LINE.finditer(text)
    if max_series > 0:
        last = next(islice(matches, max_series - 1, None), None)
        if last is None:
            return text, 0
        end, rest = last.end(), last.end() + 1
    else:
        end = rest = 0
    beyond = sum(1 for _ in _SAMPLE_LINE.finditer(text, rest))
    return text[:end], beyond


_Match = tuple[str, str, str, str, str]  # name, label block, value, timestamp, other line
_NAME, _BLOCK, _VALUE, _STAMP = (itemgetter(i) for i in range(4))


@dataclass
class ColumnBlock:
    """Label sets met as whole families, in the order every family lists them, and the values of
    each such family in that order: metric name -> one value per label set. A label set may have
    other samples in the parse's groups too (lines outside whole families)."""

    labels: list[Mapping[str, str]]
    columns: dict[str, list[float]]


@dataclass
class Scrape:
    """One parse: whole families as columns (read column by column, never per label set), the
    other samples grouped by label set, and the stats."""

    columns: list[ColumnBlock]
    groups: list[SeriesGroup]
    stats: ParseStats


class _Ref:
    """A sequence of label sets met as a whole family (every field of every GPU, in order),
    with the families waiting to be added to it column by column."""

    def __init__(self, blocks: list[str], groups: list[SeriesGroup]) -> None:
        self.blocks = blocks
        self.lengths = list(map(len, blocks))
        self.groups = groups
        self.columns: list[tuple[str, list[float]]] = []

    def values_of(self, lines: list[str], start: int) -> list[str] | None:
        """What follows each line's label block and "} ", if the lines list these label blocks
        in this order from `start` (after `name{`); else None. C-level passes that make no
        string but the values (a family's lines are 40,000 in a large scrape)."""
        blocks = self.blocks
        if len(lines) != len(blocks) or not all(map(str.startswith, lines, blocks, repeat(start))):
            return None
        ends = list(map(add, self.lengths, repeat(start)))
        if not all(map(str.startswith, lines, repeat("} "), ends)):
            return None
        return list(map(getitem, lines, map(slice, map(add, ends, repeat(2)), repeat(None))))

    def flush(self) -> None:
        """Into the groups' values, as lines read one by one are."""
        if self.columns:
            names = [name for name, _ in self.columns]
            rows = zip(*(column for _, column in self.columns), strict=True)
            for group, row in zip(self.groups, rows, strict=True):
                group.values.update(zip(names, row, strict=True))
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
        self.shapes: dict[tuple[str, ...], tuple[str, ...] | None] = {}  # _fast_labels' cache

    def group(self, block: str) -> SeriesGroup | None:
        if block in self.groups:  # not try/except: a family's 40,000 first blocks all miss
            return self.groups[block]
        labels = _fast_labels(block, self.shapes)
        group = self.groups[block] = None if labels is None else SeriesGroup(labels)
        return group

    def family_text(self, run: str, lines: list[str]) -> bool:
        """The whole-family path for a run of lines as an exporter writes a family (`lines`, the
        run split): every line `name{block} value` of one name met for the first time. Checked
        and cut with C-level passes, no regex over the text: a family listing the label blocks of
        an earlier one, in its order (every DCGM field after the first), is read by position;
        another is cut at each line's last "} " (a value has no space). A line that is not so
        makes a count differ or a value fail. False: line by line."""
        brace = run.find("{")
        name = run[:brace]
        if brace <= 0 or name in self.seen or not _METRIC_NAME.fullmatch(name):
            return False
        if run.count("\n" + run[: brace + 1]) != len(lines) - 1:  # not every line `name{`
            return False
        for ref in self.refs:
            found = ref.values_of(lines, brace + 1)
            if found is not None:
                column = _column(found)
                return column is not None and self._add_column(ref, name, column)
        heads, _, values = zip(*map(str.rpartition, lines, repeat("} ")), strict=True)
        blocks = list(map(itemgetter(slice(brace + 1, None)), heads))
        return self._add_family(name, values, blocks)

    def family(self, rows: list[_Match], names: list[str]) -> bool:
        """The whole-family path for a run of canonical lines (from _LINE): one metric name met
        for the first time, no timestamps. False: the run needs the line-by-line path."""
        name = names[0]
        if name in self.seen or names.count(name) != len(rows):
            return False
        if list(map(_STAMP, rows)).count("") != len(rows):
            return False
        return self._add_family(name, list(map(_VALUE, rows)), list(map(_BLOCK, rows)))

    def _add_family(self, name: str, values: Sequence[str], blocks: list[str]) -> bool:
        """Valid values, and label sets in an order met before (or all distinct): converted with
        C-level builtins and added to their groups in columns, once per group."""
        column = _column(values)
        if column is None:
            return False
        ref = next((ref for ref in self.refs if ref.blocks == blocks), None)
        if ref is None:
            if len(self.refs) >= self.MAX_REFS or len(set(blocks)) != len(blocks):
                return False
            groups = [self.group(block) for block in blocks]
            found = [group for group in groups if group is not None]
            if len(found) != len(groups):
                return False
            ref = _Ref(blocks, found)
            self.refs.append(ref)
        return self._add_column(ref, name, column)

    def _add_column(self, ref: _Ref, name: str, column: list[float]) -> bool:
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

    def result(self) -> Scrape:
        columns = [
            ColumnBlock([group.labels for group in ref.groups], dict(ref.columns))
            for ref in self.refs
            if ref.columns
        ]
        found = [group for group in self.groups.values() if group is not None and group.values]
        found.extend(self.slow.values())
        self.stats.samples = sum(len(group.values) for group in found) + sum(
            len(block.labels) * len(block.columns) for block in columns
        )
        return Scrape(columns, found, self.stats)


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


def _column(values: Sequence[str]) -> list[float] | None:
    """The values of a family as numbers; None if one is not a value (float() also takes
    whitespace around a number and "_" between digits, the exposition format does not)."""
    tokens = "".join(values)
    if "_" in tokens or " " in tokens or not tokens.isprintable():
        return None
    try:
        return list(map(float, values))
    except ValueError:
        return None


def _comment_ok(line: str) -> bool:
    """`# HELP name ...` and `# TYPE name type` must be well formed; other comments are free."""
    parts = line.split(None, 3)
    if len(parts) < 2 or parts[0] != "#" or parts[1] not in ("HELP", "TYPE"):
        return True
    if len(parts) < 3 or not _METRIC_NAME.fullmatch(parts[2]):
        return False
    return parts[1] == "HELP" or (len(parts) == 4 and parts[3].strip() in _TYPES)


def _fast_labels(
    block: str, shapes: dict[tuple[str, ...], tuple[str, ...] | None]
) -> Mapping[str, str] | None:
    """`a="1",b="2"` -> {"a": "1", "b": "2"}; None for what the slow path must judge.

    Free of backslashes, a block splits at its quotes into ['a=', '1', ',b=', '2', ''] (a
    trailing comma leaves ',' last): its shape (the parts between the values) and its values.
    The blocks of one exporter share a few shapes, so a shape is judged once (`shapes`, the
    parse's cache): valid, with distinct names, none reserved (else the slow path judges)."""
    if not block:
        return {}
    if "\\" in block:
        return None
    parts = block.split('"')
    shape = tuple(parts[0::2])
    try:
        names = shapes[shape]
    except KeyError:
        names = _shape_names(shape)
        if len(shapes) < MAX_SHAPES:
            shapes[shape] = names
    if names is None:
        return None
    return dict(zip(names, parts[1::2], strict=True))


MAX_SHAPES = 1024  # label-name layouts remembered per parse (hostile input cannot grow it)


def _shape_names(shape: tuple[str, ...]) -> tuple[str, ...] | None:
    if not _LABEL_BLOCK.fullmatch('""'.join(shape)):
        return None
    names = tuple(part.lstrip(",")[:-1] for part in shape[:-1])
    # Names starting "__" are reserved (prometheus_client refuses them, __name__ included).
    if len(set(names)) != len(names) or any(name.startswith("__") for name in names):
        return None
    return names


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
        block = _LABELS_TEXT.match(line, brace)
        if block is None:
            return INVALID_LABELS
        try:
            parse_labels(block[1])
        except ValueError:
            return INVALID_LABELS
    return INVALID_VALUE


# A label block up to its first unquoted "}". prometheus_client's parse_labels (0.26) loops forever
# on text with an unquoted "}" in it, such as `a="1"} 2` from the line `m{a="1"} 2} 3`.
_LABELS_TEXT = re.compile(r'\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}')


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
