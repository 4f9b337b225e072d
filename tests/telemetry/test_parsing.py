"""Parsing exposition text: prometheus_client's grammar, line by line, bad lines counted."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from telemetry.parsing import (
    DUPLICATE,
    INVALID_COMMENT,
    INVALID_LABELS,
    INVALID_VALUE,
    Sample,
    parse_exposition,
    parse_grouped,
    samples_from_vector,
)

# The example block of wire-formats.md §1 (dcgm-exporter 3.x/4.x, an H100 node with a MIG GPU).
DCGM_EXAMPLE = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-5fd4b2c3-1a2b-4c5d-8e9f-0a1b2c3d4e5f",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07",container="trainer",namespace="ml-team",pod="llama-ft-0"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-9c8b7a65-4321-4fed-bcba-987654321000",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07"} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-5fd4b2c3-1a2b-4c5d-8e9f-0a1b2c3d4e5f",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07",container="trainer",namespace="ml-team",pod="llama-ft-0"} 61234
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-9c8b7a65-4321-4fed-bcba-987654321000",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07"} 71.214000
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",UUID="GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77",pci_bus_id="00000000:3B:00.0",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07",container="kserve-container",namespace="serving",pod="tts-predictor-5554f75554-8j8pl"} 0.734512
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-5fd4b2c3-1a2b-4c5d-8e9f-0a1b2c3d4e5f",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-01",DCGM_FI_DRIVER_VERSION="550.90.07"} 0
"""  # noqa: E501


def find(samples: list[Sample], name: str, gpu: str) -> Sample:
    found = [s for s in samples if s.name == name and s.labels.get("gpu") == gpu]
    assert len(found) == 1, found
    return found[0]


def test_the_dcgm_example_parses_completely() -> None:
    samples, stats = parse_exposition(DCGM_EXAMPLE)

    assert stats.lines == 16
    assert stats.samples == len(samples) == 6
    assert stats.skipped == 0
    util = find(samples, "DCGM_FI_DEV_GPU_UTIL", "0")
    assert util.value == 87
    assert util.timestamp is None
    assert util.labels["Hostname"] == "gpu-node-01"
    assert util.labels["pod"] == "llama-ft-0"
    assert util.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert find(samples, "DCGM_FI_DEV_POWER_USAGE", "1").value == pytest.approx(71.214)
    mig = find(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "2")
    assert (mig.labels["GPU_I_PROFILE"], mig.labels["GPU_I_ID"]) == ("1g.10gb", "9")
    assert mig.value == pytest.approx(0.734512)
    assert "pod" not in find(samples, "DCGM_FI_DEV_GPU_UTIL", "1").labels


def test_samples_of_one_label_set_are_grouped() -> None:
    groups, stats = parse_grouped(DCGM_EXAMPLE)
    gpu0 = [g for g in groups if g.labels.get("gpu") == "0" and "pod" in g.labels]
    assert len(gpu0) == 1
    assert gpu0[0].values == {"DCGM_FI_DEV_GPU_UTIL": 87.0, "DCGM_FI_DEV_FB_USED": 61234.0}
    assert stats.samples == sum(len(g.values) for g in groups) == 6


def test_the_same_as_prometheus_client_on_the_example() -> None:
    ours = sorted(
        (s.name, sorted(s.labels.items()), s.value) for s in parse_exposition(DCGM_EXAMPLE)[0]
    )
    theirs = sorted(
        (s.name, sorted(s.labels.items()), s.value)
        for family in text_string_to_metric_families(DCGM_EXAMPLE)
        for s in family.samples
    )
    assert ours == theirs


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1" 87', INVALID_LABELS),  # no closing brace
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname=n1} 87', INVALID_LABELS),  # unquoted value
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0",gpu="1"} 87', INVALID_LABELS),  # duplicate label
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} eighty', INVALID_VALUE),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 8_7', INVALID_VALUE),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 8} 7', INVALID_VALUE),  # hung prometheus_client's labels
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"}', INVALID_VALUE),
        ("# TYPE DCGM_FI_DEV_GPU_UTIL", INVALID_COMMENT),  # prometheus_client would give up here
        ("# TYPE 9bad gauge", INVALID_COMMENT),
        ("# HELP", INVALID_COMMENT),
    ],
)
def test_a_malformed_line_is_skipped_counted_and_the_rest_kept(line: str, reason: str) -> None:
    lines = DCGM_EXAMPLE.splitlines()
    lines.insert(5, line)  # in the middle of the scrape
    samples, stats = parse_exposition("\n".join(lines) + "\n")

    assert len(samples) == 6
    assert stats.skipped == 1
    assert stats.skipped_reasons == {reason: 1}
    assert stats.examples and stats.examples[0].startswith(reason)


def test_garbage_in_a_scrape_loses_only_the_garbage() -> None:
    text = (
        DCGM_EXAMPLE + "\x00\x01 binary junk {{{\n}}} 5\nno_value_here\n" + 'ok_metric{a="1"} 2\n'
    )
    samples, stats = parse_exposition(text)
    assert len(samples) == 7
    assert stats.skipped == 3
    assert sum(stats.skipped_reasons.values()) == 3


def test_examples_are_bounded() -> None:
    _, stats = parse_exposition("bad{\n" * 50)
    assert stats.skipped == 50
    assert len(stats.examples) == 5


def test_escaped_label_values_go_through_prometheus_client() -> None:
    text = 'm{pod="a\\"b",path="c:\\\\d",note="x\\ny",brace="}"} 1\n'
    samples, stats = parse_exposition(text)
    assert stats.skipped == 0
    assert dict(samples[0].labels) == {"pod": 'a"b', "path": "c:\\d", "note": "x\ny", "brace": "}"}


def test_timestamps_special_values_and_spacing() -> None:
    text = (
        'a{x="1"} 1.5 1767225600123\n'
        "b 2\n"
        'c{x="1"} NaN\n'
        'd{x="1"} +Inf\n'
        'e{x="1"} -Inf\n'
        'f{x="1"} 1e3\n'
        '  g{x="1"}   7  \n'
        'h{x="1",} 8\r\n'
        "i{} 9\n"
        "j\t10\n"
        "\n"
    )
    samples, stats = parse_exposition(text)
    assert stats.skipped == 0, stats.examples
    got = {s.name: s for s in samples}
    assert got["a"].timestamp == pytest.approx(1767225600.123)
    assert got["b"].value == 2 and dict(got["b"].labels) == {}
    assert math.isnan(got["c"].value)
    assert got["d"].value == math.inf and got["e"].value == -math.inf
    assert got["f"].value == 1000
    assert got["g"].value == 7 and got["h"].value == 8 and got["i"].value == 9
    assert got["j"].value == 10


def test_a_repeated_series_is_a_duplicate() -> None:
    samples, stats = parse_exposition('m{a="1"} 1\nm{a="1"} 2\nm{a="2"} 3\n')
    assert [(s.labels["a"], s.value) for s in samples] == [("1", 1), ("2", 3)]
    assert stats.skipped_reasons == {DUPLICATE: 1}


def test_dcgm_1x_lowercase_names_parse_as_plain_metrics() -> None:
    text = (
        "# HELP dcgm_gpu_utilization GPU utilization (in %).\n"
        "# TYPE dcgm_gpu_utilization gauge\n"
        'dcgm_gpu_utilization{gpu="0",uuid="GPU-1",pod_name="p",pod_namespace="ns"} 40\n'
    )
    samples, stats = parse_exposition(text)
    assert stats.skipped == 0
    assert samples[0].name == "dcgm_gpu_utilization"
    assert samples[0].labels["pod_name"] == "p"


def test_empty_text() -> None:
    assert parse_exposition("") == ([], parse_exposition("")[1])
    assert parse_exposition("")[1].lines == 0
    assert parse_exposition("\n\n")[1].lines == 2


# --- the fast path agrees with prometheus_client on whatever it accepts -------------------------

label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: name != "__name__"
)
label_values = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n"), max_size=12)
values = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e3", ".5", "5.", "0x10", "1_0", "inf", "Infinity"]),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@settings(deadline=None)
@example(name=":", labels={"__": ""}, value="0", timestamp=None)  # found by hypothesis: reserved
@given(
    name=st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True),
    labels=st.dictionaries(label_names, label_values, max_size=4),
    value=values,
    timestamp=st.one_of(st.none(), st.integers(0, 2**41)),
)
def test_fast_path_agrees_with_prometheus_client(
    name: str, labels: dict[str, str], value: str, timestamp: int | None
) -> None:
    block = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    line = f"{name}{{{block}}} {value}" + (f" {timestamp}" if timestamp is not None else "")
    try:
        expected = [s for f in text_string_to_metric_families(line + "\n") for s in f.samples]
    except Exception:
        expected = None
    samples, stats = parse_exposition(line + "\n")
    if expected is None:
        assert samples == [] and stats.skipped == 1
        return
    assert len(samples) == len(expected) == 1
    ours, theirs = samples[0], expected[0]
    assert (ours.name, dict(ours.labels)) == (theirs.name, theirs.labels)
    assert ours.value == theirs.value or (math.isnan(ours.value) and math.isnan(theirs.value))
    assert ours.timestamp == (None if theirs.timestamp is None else pytest.approx(theirs.timestamp))


# --- the Prometheus HTTP API's vectors ----------------------------------------------------------


def test_samples_from_an_instant_vector() -> None:
    result = [
        {
            "metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "n1", "gpu": "0"},
            "value": [1767225600.123, "87"],
        },
        {"metric": {"Hostname": "n1", "gpu": "1"}, "value": [1767225600.123, "NaN"]},
        {"metric": {"gpu": "2"}},  # no value
        {"metric": {"gpu": "3"}, "value": [1767225600.123, "lots"]},
        "not even a dict",
    ]
    samples, stats = samples_from_vector(result, name="FALLBACK")  # type: ignore[arg-type]
    assert [(s.name, s.labels["gpu"]) for s in samples] == [
        ("DCGM_FI_DEV_GPU_UTIL", "0"),
        ("FALLBACK", "1"),
    ]
    assert samples[0].value == 87 and samples[0].timestamp == pytest.approx(1767225600.123)
    assert "__name__" not in samples[0].labels
    assert math.isnan(samples[1].value)
    assert stats.lines == 5 and stats.samples == 2 and stats.skipped == 3


def test_a_vector_without_names_needs_one() -> None:
    samples, stats = samples_from_vector([{"metric": {}, "value": [1, "1"]}])
    assert samples == [] and stats.skipped == 1


# --- whole families at once (the columnar fast path) read the same as line by line --------------


def _normalized(text: str, *, columnar: bool) -> object:
    groups, stats = parse_grouped(text, columnar=columnar)
    # Groups are keyed by their label block's text, so one label set written in two orders is two
    # groups, met in an order that differs between the paths: compare every label set's samples
    # as a sorted list, whichever group carried them.
    by_labels: dict[frozenset[tuple[str, str]], list[tuple[str, str, float | None]]] = {}
    for g in groups:
        samples = by_labels.setdefault(frozenset(g.labels.items()), [])
        for name, value in g.values.items():  # repr: NaN == NaN here
            samples.append((name, repr(value), (g.timestamps or {}).get(name)))
    normal = {key: sorted(samples, key=repr) for key, samples in by_labels.items()}
    return normal, (stats.lines, stats.samples, stats.skipped, stats.skipped_reasons)


gpu_label_sets = st.lists(
    st.fixed_dictionaries(
        # A label value may hold "} " (the whole-family path cuts a line at its last one).
        {"gpu": st.integers(0, 7).map(str), "Hostname": st.sampled_from(["n1", "n2", "n} 3"])},
        optional={"pod": st.sampled_from(["a", "b"]), "GPU_I_ID": st.sampled_from(["1", "2"])},
    ),
    min_size=1,
    max_size=6,
)
family_names = st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "X", "Y"])


@st.composite
def expositions(draw: st.DrawFn) -> str:
    label_sets = draw(gpu_label_sets)
    out = []
    for _ in range(draw(st.integers(1, 6))):
        name = draw(family_names)
        out.append(f"# HELP {name} something\n# TYPE {name} gauge\n")
        order = draw(st.sampled_from(["same", "reversed", "subset", "shuffled"]))
        members = list(label_sets)
        if order == "reversed":
            members.reverse()
        elif order == "subset":
            members = members[: draw(st.integers(1, len(members)))]
        elif order == "shuffled":
            members = draw(st.permutations(members))
        for labels in members:
            block = ",".join(f'{k}="{v}"' for k, v in labels.items())
            value = draw(st.sampled_from(["1", "2.5", "NaN", "bad", "+Inf", "1_0", "4} 5"]))
            stamp = draw(st.sampled_from(["", "", "", " 1767225600123"]))
            out.append(f"{name}{{{block}}} {value}{stamp}\n")
        if draw(st.booleans()):
            out.append(draw(st.sampled_from(["garbage\n", "\n", "# a comment\n", "m{x=1} 2\n"])))
    return "".join(out)


# Found by hypothesis on CI: one label set written in two orders, the second line's value invalid.
ONE_LABEL_SET_TWO_ORDERS = (
    "# HELP DCGM_FI_DEV_GPU_UTIL something\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} 1\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1",pod="a"} 1\n'
    'DCGM_FI_DEV_FB_USED{Hostname="n1",pod="a",gpu="0"} 1\n'
    'DCGM_FI_DEV_FB_USED{Hostname="n1",gpu="0"} 1\n'
    'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1"} bad\n'
)


@settings(deadline=None, max_examples=200)
@given(text=expositions())
@example(text=ONE_LABEL_SET_TWO_ORDERS)
def test_columnar_parsing_reads_the_same_as_line_by_line(text: str) -> None:
    assert _normalized(text, columnar=True) == _normalized(text, columnar=False)
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    assert parse_grouped(text)[1].lines == lines


def test_a_dcgm_scrape_takes_the_columnar_path_and_a_mig_gap_does_not_break_it() -> None:
    lines = DCGM_EXAMPLE.splitlines()
    text = "\n".join(lines) + "\n"
    assert _normalized(text, columnar=True) == _normalized(text, columnar=False)
    # A family after a duplicate of an earlier one: the repeat is skipped, the first value kept.
    twice = text + text.split("# HELP DCGM_FI_DEV_FB_USED")[0]
    groups, stats = parse_grouped(twice)
    assert stats.skipped_reasons == {DUPLICATE: 2}
    assert any(g.values.get("DCGM_FI_DEV_GPU_UTIL") == 87 for g in groups)
