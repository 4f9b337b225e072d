"""OpenAPI naming for HackSoft-style APIs: `WorkloadCreateApi.InputSerializer` becomes the
component `WorkloadCreateInput` (instead of dozens of clashing `Input`/`Output` components); and
request bodies read by a StrictSerializer are closed objects (`additionalProperties: false`), as
the server refuses unknown keys."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular import openapi

from api.fields import StrictSerializer


class AutoSchema(openapi.AutoSchema):
    def get_serializer_name(
        self, serializer: Any, direction: Literal["request", "response"]
    ) -> str:
        cls = type(serializer)
        outer, _, inner = cls.__qualname__.rpartition(".")
        if outer:
            return outer.split(".")[-1].removesuffix("Api") + inner.removesuffix("Serializer")
        name: str = super().get_serializer_name(serializer, direction)
        return name

    def get_tags(self) -> list[str]:
        path = self.path.removeprefix("/api/v1/")
        parts = [p for p in path.split("/") if p and not p.startswith("{")]
        if parts and parts[0] == "admin":
            return ["admin"]
        return [parts[0]] if parts else ["api"]

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and isinstance(serializer, StrictSerializer):
            schema["additionalProperties"] = False
        return schema
