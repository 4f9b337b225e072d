"""The Kueue compatibility table of docs/api.md is the registry the reader refuses from."""

from __future__ import annotations

from pathlib import Path

from scheduling.core.queueing import compatibility

API_DOC = Path(__file__).parents[4] / "docs" / "api.md"


def test_the_documented_table_is_the_registry() -> None:
    assert compatibility.markdown_table() in API_DOC.read_text()


def test_every_feature_says_why() -> None:
    for feature in compatibility.FEATURES:
        assert feature.status in (
            compatibility.HONOURED,
            compatibility.REFUSED,
            compatibility.PARTLY,
        )
        assert len(feature.why) > 20, feature
