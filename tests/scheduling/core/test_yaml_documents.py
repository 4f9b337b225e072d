"""The one YAML loader's bounds: nesting (issue 33: 5,000 levels raised RecursionError in
`applyqueues`)."""

import pytest

from scheduling.core.yaml_documents import MAX_DEPTH, YamlError, load_all


@pytest.mark.parametrize("opening", ["[", "{a: "])
def test_nesting_deeper_than_the_limit_is_an_error_naming_the_line(opening: str) -> None:
    closing = "]" if opening == "[" else "}"
    with pytest.raises(YamlError, match=f"nested deeper than {MAX_DEPTH} levels"):
        load_all(opening * 5000 + "1" + closing * 5000)


def test_nesting_up_to_the_limit_loads() -> None:
    doc = load_all("[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH)[0]
    for _ in range(MAX_DEPTH):
        doc = doc[0]
    assert doc == 1
