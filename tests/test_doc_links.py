"""Every relative link in README.md and docs/*.md leads to a file that exists, and a link to a
heading (`page.md#anchor` or `#anchor`) to a heading of that page, named as GitHub names the
anchors of rendered headings. Links inside code (fenced blocks, `spans`) are not links."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
INLINE_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def without_code(markdown: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, every character but letters,
    digits, `_`, `-` and spaces dropped, spaces made hyphens."""
    text = INLINE_LINK.sub(r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor; a repeated one gets -1, -2, ... as GitHub numbers them."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        name = anchor(heading)
        found.add(f"{name}-{seen[name]}" if seen[name] else name)
        seen[name] += 1
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(without_code(page.read_text())):
        if SCHEME.match(target):
            continue
        path, _, fragment = target.partition("#")
        base = ROOT if path.startswith("/") else page.parent
        linked = (base / path.lstrip("/")).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT)}")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text()):
            broken.append(f"{target}: no heading #{fragment} in {linked.relative_to(ROOT)}")
    return broken


def test_github_anchors_of_headings_as_the_docs_write_them() -> None:
    assert anchor("Asking offline: `manage.py explain`") == "asking-offline-managepy-explain"
    assert anchor("Queues on Kubernetes: Kueue's objects, or beside Kueue") == (
        "queues-on-kubernetes-kueues-objects-or-beside-kueue"
    )
    assert anchors("# A\n```sh\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def test_links_inside_code_are_not_links() -> None:
    assert LINK.findall(without_code("`[a](gone.md)`\n```\n[b](gone.md)\n```\n[c](here.md)")) == [
        "here.md"
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []
