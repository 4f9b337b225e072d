"""Size limits on what a tenant sends, and Kubernetes' rules for the names in it. Pure: the REST API
checks its bodies with these (api/views/common.py) and the Kubernetes translation checks pods
with them (kube/translate.py), so a pod the API refuses is refused on Kubernetes too.

Everything a tenant writes is stored, shipped to the scheduler and kept in its memory, so every
part is bounded: without it one request with a 1 MiB node-selector key and 500 pods was 524 MB
of JSON in the pod table. The bounds are far above real use (docs/security.md lists them all):

    node selector          at most 32 entries; keys are label keys, values label values
    resource maps          at most 16 entries (requests, quotas, limits); keys are resource names
    tolerations            at most 32; keys label keys, values label values
    GPU models             at most 16, each at most 128 characters

Label keys and resource names are Kubernetes qualified names: an optional DNS subdomain prefix
(at most 253 characters) and `/`, then a name of at most 63 characters (letters, digits, `-`,
`_`, `.`, starting and ending with a letter or digit). Label values are empty or such a name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

MAX_SELECTOR_ENTRIES = 32
MAX_RESOURCE_ENTRIES = 16
MAX_TOLERATIONS = 32
MAX_GPU_MODELS = 16
MAX_GPU_MODEL_LENGTH = 128
MAX_PREFIX_LENGTH = 253
MAX_NAME_LENGTH = 63
MAX_KEY_LENGTH = MAX_PREFIX_LENGTH + 1 + MAX_NAME_LENGTH
SHOWN = 40  # characters of an offending key quoted in a message or an error path

NAME_PATTERN = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
PREFIX_PATTERN = r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)"
QUALIFIED_NAME = re.compile(rf"^(?:{PREFIX_PATTERN}/)?{NAME_PATTERN}$")
LABEL_VALUE = re.compile(rf"^{NAME_PATTERN}?$")


def shown(text: str) -> str:
    """`text` as quoted in messages and error paths: never more than SHOWN characters."""
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}..."


def qualified_name_error(key: object) -> str | None:
    """Why `key` is not a label key / resource name, or None."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty string"
    if len(key) > MAX_KEY_LENGTH:
        return f"at most {MAX_KEY_LENGTH} characters (got {len(key)})"
    prefix, slash, name = key.rpartition("/")
    if slash and len(prefix) > MAX_PREFIX_LENGTH:
        return f"the prefix before '/' is at most {MAX_PREFIX_LENGTH} characters"
    if len(name) > MAX_NAME_LENGTH:
        return f"the name after any '/' is at most {MAX_NAME_LENGTH} characters"
    if not QUALIFIED_NAME.match(key):
        return (
            "must be a Kubernetes qualified name: an optional DNS prefix and '/', then letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def label_value_error(value: object) -> str | None:
    """Why `value` is not a label value, or None."""
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > MAX_NAME_LENGTH:
        return f"at most {MAX_NAME_LENGTH} characters (got {len(value)})"
    if not LABEL_VALUE.match(value):
        return (
            "must be empty or letters, digits, '-', '_' or '.', starting and ending with a "
            "letter or digit"
        )
    return None


def map_errors(
    doc: Mapping[object, object],
    *,
    max_entries: int,
    value_error: Callable[[object], str | None] | None = label_value_error,
) -> dict[str, str]:
    """What is wrong with a map of qualified names: {"": problem of the whole map} or
    {shown(key): problem of that entry}. The size is checked first, so a map of 10,000 keys
    costs one len()."""
    if len(doc) > max_entries:
        return {"": f"at most {max_entries} entries (got {len(doc)})"}
    errors: dict[str, str] = {}
    for key, value in doc.items():
        problem = qualified_name_error(key)
        if problem is None and value_error is not None:
            problem = value_error(value)
        if problem is not None:
            errors[shown(str(key))] = problem
    return errors


def first_problem(errors: Mapping[str, str], what: str) -> str | None:
    """One line for the first of `map_errors`' problems, e.g. for a Kubernetes event."""
    for key, problem in errors.items():
        return f"{what}: {problem}" if not key else f"{what} {key!r}: {problem}"
    return None
