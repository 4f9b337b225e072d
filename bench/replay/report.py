"""The FGD authors' published results (fgd_analysis_*_discrete.csv) and the allocation plot."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.replay.openb import MAX_PERCENT, ReplayResult, TraceError

# Our profile name -> the paper's `sc_policy` column.
PAPER_POLICIES = {
    "random-fit": "01-Random",
    "dot-product": "02-DotProd",
    "gpu-clustering": "03-GpuClustering",
    "gpu-packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}


def paper_curves(path: Path | str, trace: str) -> dict[str, list[float]]:
    """Per paper policy (`06-FGD`, ...): the mean over its seeds at each arrived percent 0..130, for
    the pod list `openb_pod_list_<trace>`. Empty when the file has no rows for that trace."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    workload = f"openb_pod_list_{trace}"
    sums: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("workload") != workload:
                continue
            policy = row["sc_policy"]
            values = [float(row[str(k)]) for k in range(MAX_PERCENT + 1)]
            acc = sums.setdefault(policy, [0.0] * len(values))
            for k, v in enumerate(values):
                acc[k] += v
            counts[policy] = counts.get(policy, 0) + 1
    return {p: [v / counts[p] for v in acc] for p, acc in sorted(sums.items())}


def paper_points(curves: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """The published means at 100% and 130% arrival, per paper policy."""
    return {
        policy: {"100": round(values[100], 2), "130": round(values[MAX_PERCENT], 2)}
        for policy, values in curves.items()
    }


def ours(result: ReplayResult) -> list[float | None]:
    """A replay's mean allocation ratio at each arrived percent, for `plot`."""
    return from_json(result.to_json())


def from_json(doc: Mapping[str, object]) -> list[float | None]:
    """The allocation ratio curve of a saved `replay --json` output."""
    alloc = doc.get("alloc_ratio")
    if not isinstance(alloc, Mapping):
        raise TraceError("not a replay JSON output: no alloc_ratio")
    return [alloc.get(str(k)) for k in range(MAX_PERCENT + 1)]


def plot(
    curves: Mapping[str, Sequence[float | None]],
    paper: Mapping[str, Sequence[float]],
    out: Path | str,
    *,
    title: str = "",
) -> None:
    """Allocation ratio against arrived GPU demand: our curves (solid, by label) over the paper's
    (dashed), the whole range on the left and 80-130% on the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(MAX_PERCENT + 1))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    cmap = plt.get_cmap("tab10")
    colors = {policy: cmap(k % 10) for k, policy in enumerate(paper)}
    for label in curves:  # ours in the colour of the same paper policy, new colours otherwise
        colors.setdefault(PAPER_POLICIES.get(label, label), cmap(len(colors) % 10))
    for ax, lo in zip(axes, (0, 80), strict=True):
        for policy, published in paper.items():
            ax.plot(
                xs[lo:], published[lo:], "--", color=colors[policy], lw=1.1, label=f"paper {policy}"
            )
        for label, values in curves.items():
            ys = [float("nan") if v is None else v for v in values]
            color = colors[PAPER_POLICIES.get(label, label)]
            ax.plot(xs[lo:], ys[lo:], "-", color=color, lw=2.0, label=f"ours {label}")
        ax.set_xlim(lo, MAX_PERCENT)
        ax.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
        ax.set_ylabel("GPU allocation ratio (%)")
        ax.grid(True, alpha=0.3)
    axes[0].plot(xs, xs, ":", color="grey", lw=0.8)
    axes[1].set_ylim(80, 100)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(title or "openb replay: GPU allocation ratio")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def markdown_table(docs: Sequence[Mapping[str, object]]) -> str:
    """Saved `replay --json` outputs as a table: ours vs the paper's mean at 100% and 130% arrival
    (the paper's FGD for policies the paper does not have)."""
    lines = [
        "| trace | policy | seeds | ours @100 | paper @100 | diff "
        "| ours @130 | paper @130 | diff |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for doc in docs:
        alloc = doc.get("alloc_ratio")
        paper = doc.get("paper")
        if not isinstance(alloc, Mapping):
            continue
        policy = str(doc.get("policy"))
        reference = PAPER_POLICIES.get(policy, PAPER_POLICIES["fgd"])
        published = paper.get(reference, {}) if isinstance(paper, Mapping) else {}
        label = policy if policy in PAPER_POLICIES else f"{policy} (vs paper FGD)"
        seeds = doc.get("seeds")
        cells = [str(doc.get("trace")), label, str(len(seeds) if isinstance(seeds, list) else "?")]
        for point in ("100", "130"):
            mine, theirs = alloc.get(point), published.get(point)
            if isinstance(mine, float) and isinstance(theirs, float):
                cells += [f"{mine:.2f}", f"{theirs:.2f}", f"{mine - theirs:+.2f}"]
            else:
                cells += [f"{mine:.2f}" if isinstance(mine, float) else "-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """`python -m bench.replay.report [--plot OUT.png --paper CSV] RESULT.json...`: the
    markdown table of saved `replay --json` outputs and, with --plot, their curves over the paper's
    (results of one trace)."""
    parser = argparse.ArgumentParser(prog="python -m bench.replay.report")
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--paper", type=Path)
    args = parser.parse_args(argv)
    docs = [json.loads(path.read_text()) for path in args.results]
    if args.plot:
        traces = {str(d.get("trace")) for d in docs}
        if len(traces) != 1 or args.paper is None:
            parser.error("--plot needs --paper and results of one trace")
        (trace,) = traces
        mine = {str(d.get("policy")): from_json(d) for d in docs}
        title = f"openb {trace}: {', '.join(mine)} vs the paper"
        plot(mine, paper_curves(args.paper, trace), args.plot, title=title)
    order = {"default": 0, "gpushare40": 1, "cpu100": 2, "multigpu50": 3}
    docs.sort(
        key=lambda d: (order.get(str(d.get("trace")), 9), str(d.get("trace")), str(d.get("policy")))
    )
    print(markdown_table(docs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
