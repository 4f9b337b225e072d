"""Request fields that refuse exactly what the OpenAPI schema refuses, and say so with a 400.

The schema is the contract (tests/api/test_schema.py holds the server to it with schemathesis):
whatever it allows must not get a 400, whatever it forbids must. So each field here checks the
form the schema documents for it, and documents the form it checks: JSON types as they are
(`{"name": 0}` is not a name), closed objects, bounded maps of Kubernetes names
(scheduling/core/limits.py), quantities in Kubernetes' grammar. What depends on the cluster, the
tenant or several fields at once (an unknown queue, more GPUs than any node has, a value beyond
any cluster) is judged after these, and refused with a 422 in the same shape (api/exceptions.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from drf_spectacular.drainage import set_override
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.core import limits, quantity
from scheduling.core.types import GPU_MILLI_RESOURCE, GPU_RESOURCE

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_LABEL_MESSAGE = "must be a DNS label: lowercase letters, digits and '-', at most 63 characters"

# Quantities as the schema documents them: Kubernetes' grammar without a sign (the value itself
# is judged by scheduling/core/quantity.py); counts of devices are plain numbers.
QUANTITY_PATTERN = (
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)
COUNT_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)$"


def _number_or_text(pattern: str) -> dict[str, Any]:
    return {
        "oneOf": [
            {"type": "string", "pattern": pattern, "maxLength": quantity.MAX_TEXT},
            {"type": "number", "minimum": 0},
        ]
    }


QUANTITY_SCHEMA = _number_or_text(QUANTITY_PATTERN)
COUNT_SCHEMA = _number_or_text(COUNT_PATTERN)


class QuerySerializer(serializers.Serializer):
    """Query parameters: unknown ones are errors (a typo like `limt` must not be ignored)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(k) for k in data if k not in self.fields)
            if unknown:
                raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
        return super().to_internal_value(data)


class StrictSerializer(QuerySerializer):
    """Request bodies: unknown keys are errors (the schema closes these objects, api/schema.py),
    and every value must already have the JSON type the schema gives it: DRF alone turns `0`
    into "0" for a string field and "5" into 5 for an integer one."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            errors = {
                str(key): [problem]
                for key, value in data.items()
                if key in self.fields and (problem := json_type_error(self.fields[key], value))
            }
            if errors:
                raise serializers.ValidationError(errors)
            data = {key: _json_integer(self.fields.get(key), value) for key, value in data.items()}
        return super().to_internal_value(data)


def _json_integer(field: serializers.Field | None, value: Any) -> Any:
    """JSON Schema's integer is any number without a fractional part, 512.0 included; Python's
    json reads that one as a float, which DRF's IntegerField would refuse when it is large."""
    if isinstance(field, serializers.IntegerField) and _is_whole_float(value):
        return int(value)
    return value


def _is_whole_float(value: Any) -> bool:
    return isinstance(value, float) and value.is_integer()


def json_type_error(field: serializers.Field, value: Any) -> str | None:
    """Why `value` does not have the JSON type `field` is documented with (lists and maps of
    scalars included), or None. Nested serializers check their own fields."""
    if value is None:
        return None  # allow_null decides
    if isinstance(field, serializers.ListField):
        if not isinstance(value, list):
            return None  # the field's own message
        return next(filter(None, (json_type_error(field.child, item) for item in value)), None)
    if isinstance(field, serializers.ChoiceField | serializers.CharField):
        return None if isinstance(value, str) else "must be a string"
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(field, serializers.IntegerField):
        whole = (isinstance(value, int) and not isinstance(value, bool)) or _is_whole_float(value)
        return None if whole else "must be an integer"
    if isinstance(field, serializers.FloatField):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return None if number else "must be a number"
    return None


def dns_label(**kwargs: Any) -> serializers.RegexField:
    return serializers.RegexField(
        DNS_LABEL, max_length=63, error_messages={"invalid": DNS_LABEL_MESSAGE}, **kwargs
    )


def _quantity_form_error(value: Any, pattern: re.Pattern[str]) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return "must be a quantity string such as '8', '500m' or '64Gi'"
    if isinstance(value, str):
        if len(value) > quantity.MAX_TEXT or not pattern.match(value):
            if pattern is _COUNT:
                return f"a count takes a plain number such as '4', not {limits.shown(value)!r}"
            return f"{limits.shown(value)!r} is not a quantity (e.g. '8', '500m' or '64Gi')"
    elif value < 0:
        return "must not be negative"
    return None


_QUANTITY = re.compile(QUANTITY_PATTERN)
_COUNT = re.compile(COUNT_PATTERN)


@extend_schema_field(QUANTITY_SCHEMA)
class QuantityField(serializers.Field):
    """A Kubernetes quantity, "8", "500m", "64Gi" (or a plain number): its form is checked here,
    its value by scheduling/core/quantity.py where the resource is known (api/specs.py)."""

    def to_internal_value(self, data: Any) -> Any:
        problem = _quantity_form_error(data, _QUANTITY)
        if problem:
            raise serializers.ValidationError(problem)
        return data

    def to_representation(self, value: Any) -> Any:
        return str(value)


class ResourceMapField(serializers.Field):
    """Resource name -> quantity (requests, quotas, limits): at most MAX_RESOURCE_ENTRIES
    entries whose keys are Kubernetes resource names (qualified names), counts of devices as
    plain numbers. Which names a map may hold (an unknown bare name, a MIG profile that is none)
    is judged with the values, in api/specs.py and api/services.py (a 422). The size is checked
    first and an offending key is quoted by its first characters only, so a map of 10,000 keys
    or a 1 MiB key costs a short 400."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        counts = {r: COUNT_SCHEMA for r in (GPU_RESOURCE, GPU_MILLI_RESOURCE, "pods")}
        set_override(
            self,
            "field",
            {
                "type": "object",
                "maxProperties": limits.MAX_RESOURCE_ENTRIES,
                "propertyNames": {
                    "type": "string",
                    "pattern": limits.QUALIFIED_NAME.pattern,
                    "maxLength": limits.MAX_KEY_LENGTH,
                },
                "properties": counts,
                "patternProperties": {r"^nvidia\.com/mig-": COUNT_SCHEMA},  # MIG instances
                "additionalProperties": QUANTITY_SCHEMA,
                "example": {"cpu": "8", "memory": "64Gi", GPU_RESOURCE: "4"},
            },
        )

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError("must be an object of resource name -> quantity")
        if len(data) > limits.MAX_RESOURCE_ENTRIES:
            raise serializers.ValidationError(
                f"at most {limits.MAX_RESOURCE_ENTRIES} resources (got {len(data)})"
            )
        errors: dict[str, list[str]] = {}
        for key, value in data.items():
            problem = limits.qualified_name_error(key)
            if problem:
                errors[limits.shown(str(key))] = [f"not a resource name: {problem}"]
                continue
            problem = _quantity_form_error(value, _COUNT if quantity.is_count(key) else _QUANTITY)
            if problem:
                errors[key] = [problem]
        if errors:
            raise serializers.ValidationError(errors)
        return dict(data)

    def to_representation(self, value: Any) -> Any:
        return {str(k): str(v) for k, v in value.items()}


@extend_schema_field(
    {"type": "string", "pattern": limits.LABEL_VALUE.pattern, "maxLength": limits.MAX_NAME_LENGTH}
)
class LabelValueField(serializers.CharField):
    """A label value: empty, or at most 63 letters, digits, '-', '_', '.'."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_blank", True)
        super().__init__(max_length=limits.MAX_NAME_LENGTH, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        problem = limits.label_value_error(data)
        if problem:
            raise serializers.ValidationError(problem)
        return data


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": limits.MAX_SELECTOR_ENTRIES,
        "propertyNames": {
            "type": "string",
            "pattern": limits.QUALIFIED_NAME.pattern,
            "maxLength": limits.MAX_KEY_LENGTH,
        },
        "additionalProperties": {
            "type": "string",
            "pattern": limits.LABEL_VALUE.pattern,
            "maxLength": limits.MAX_NAME_LENGTH,
        },
        "example": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    }
)
class LabelMapField(serializers.DictField):
    """A node selector: label keys to label values, at most MAX_SELECTOR_ENTRIES; sized before
    anything else, offending keys quoted by their first characters."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=LabelValueField(), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError("must be an object of label key -> value")
        problems = limits.map_errors(data, max_entries=limits.MAX_SELECTOR_ENTRIES)
        if "" in problems:
            raise serializers.ValidationError(problems[""])
        if problems:
            raise serializers.ValidationError({k: [why] for k, why in problems.items()})
        return {str(k): str(v) for k, v in data.items()}


@extend_schema_field(
    {
        "type": "string",
        "pattern": f"^$|{limits.QUALIFIED_NAME.pattern}",
        "maxLength": limits.MAX_KEY_LENGTH,
    }
)
class LabelKeyField(serializers.CharField):
    """A label key (a toleration's), or empty."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=limits.MAX_KEY_LENGTH, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        problem = limits.qualified_name_error(data) if data != "" else None
        if problem:
            raise serializers.ValidationError(problem)
        return data
