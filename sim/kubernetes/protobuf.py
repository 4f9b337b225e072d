"""Request bodies in Kubernetes' protobuf encoding, read into the JSON objects the rest of the
simulated API server works on.

client-go's generated clients for built-in kinds send `Content-Type:
application/vnd.kubernetes.protobuf` (kubectl 1.32's `create namespace`, `create configmap`,
`create job`, `debug node/...`; kube-scheduler's Bindings: `Request.UseProtobufAsDefault` in
k8s.io/client-go/rest/request.go), and client-go never falls back to JSON after a 415 for it (its
415 fallback is for CBOR only: `requestClientContentConfigProvider` in rest/client.go). So the
body has to be read as the API server reads it.

The envelope (k8s.io/apimachinery pkg/runtime/serializer/protobuf/protobuf.go): the four bytes
`k8s\\x00`, then a runtime.Unknown message {typeMeta {apiVersion = 1, kind = 2} = 1, raw = 2,
contentEncoding = 3, contentType = 4} whose `raw` is the object's own message (its fields in
sim/kubernetes/protoschema.py). Wire format: protobuf's varints, length-delimited fields and
fixed 32/64-bit fields (https://protobuf.dev/programming-guides/encoding/).

A field the schema does not read is skipped when it holds nothing (gogo writes every non-pointer
field, set or not), and refused, naming its path, when it holds something: nothing a client
sends is dropped silently.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sim.kubernetes import errors
from sim.kubernetes.meta import micro_time, rfc3339
from sim.kubernetes.protoschema import MESSAGES

Obj = dict[str, Any]
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_SCALARS = ("s", "i", "b", "y", "T", "M", "Q", "IS")


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # a scalar code, "{x}" for a map, a message name, or "-" (not read)
    repeated: bool = False
    inline: bool = False
    keep_zero: bool = False


def _schema(text: str) -> dict[int, Field]:
    fields: dict[int, Field] = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        number, name, kind = entry.split()
        keep_zero = kind[-1] in "?!"
        kind = kind.rstrip("?!")
        repeated, inline = kind.startswith("*"), kind.startswith("^")
        fields[int(number)] = Field(name, kind.lstrip("*^"), repeated, inline, keep_zero)
    return fields


SCHEMA: dict[str, dict[int, Field]] = {name: _schema(text) for name, text in MESSAGES.items()}


class Unreadable(Exception):
    """A protobuf body the simulated API server cannot read faithfully."""


def unreadable(what: str) -> errors.ApiError:
    return errors.ApiError(
        415,
        "UnsupportedMediaType",
        f"the simulated API server does not read {what} from a protobuf body; send the object "
        "as JSON (kubectl create -f and kubectl apply -f do)",
    )


def decode(data: bytes) -> Obj:
    """The object of a protobuf request body, apiVersion and kind from its envelope."""
    if not data.startswith(MAGIC):
        raise errors.bad_request(
            f"provided data does not appear to be a protobuf message, expected prefix {list(MAGIC)}"
        )
    try:
        envelope = _message(data[len(MAGIC) :], _ENVELOPE, "")
        kind = str(envelope.get("typeMeta", {}).get("kind", ""))
        if envelope.get("contentEncoding"):
            raise Unreadable(f"a body with contentEncoding {envelope['contentEncoding']!r}")
        if kind not in SCHEMA:
            raise Unreadable(f"{kind or 'an object without a kind'}")
        raw = base64.b64decode(envelope.get("raw", ""))
        obj = _message(raw, SCHEMA[kind], "")
    except Unreadable as exc:
        raise unreadable(str(exc)) from exc
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"unable to decode the protobuf body: {exc}") from exc
    api_version = envelope.get("typeMeta", {}).get("apiVersion")
    return {"apiVersion": api_version, "kind": kind, **obj} if api_version else {**obj}


_ENVELOPE = {
    1: Field("typeMeta", "TypeMeta"),
    2: Field("raw", "y"),
    3: Field("contentEncoding", "s"),
    4: Field("contentType", "s"),
}
SCHEMA["TypeMeta"] = {1: Field("apiVersion", "s"), 2: Field("kind", "s")}  # runtime.TypeMeta


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _wire(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field: ints for varints and fixed fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == LENGTH:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError(f"field {number} runs past the end of its message")
            yield number, wire, data[pos : pos + size]
            pos += size
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            yield number, wire, int.from_bytes(data[pos : pos + width], "little")
            pos += width
        else:
            raise ValueError(f"illegal wire type {wire} for field {number}")


def _holds_nothing(value: int | bytes) -> bool:
    """A zero scalar, an empty string, or a message all of whose fields hold nothing."""
    if isinstance(value, int):
        return value == 0
    if not value:
        return True
    try:
        return all(_holds_nothing(inner) for _, _, inner in _wire(value))
    except (IndexError, ValueError):
        return False  # not a message: a non-empty string or bytes


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _message(data: bytes, schema: dict[int, Field], path: str) -> Obj:
    out: Obj = {}
    for number, wire, value in _wire(data):
        field = schema.get(number)
        if field is None or field.kind == "-":
            if _holds_nothing(value):
                continue
            raise Unreadable(path + (field.name if field else f"<field {number}>"))
        here = path + field.name
        if field.repeated:
            items = out.setdefault(field.name, [])
            if field.kind == "i" and wire == LENGTH:  # packed
                assert isinstance(value, bytes)
                pos = 0
                while pos < len(value):
                    item, pos = _varint(value, pos)
                    items.append(_signed(item))
                continue
            items.append(_value(field, value, f"{here}[{len(items)}]", keep=True))
        elif field.kind.startswith("{"):
            key, item = _entry(field, value, here)
            out.setdefault(field.name, {})[key] = item
        elif field.inline:
            out.update(_message(_bytes(value), SCHEMA[field.kind], path))
        else:
            decoded = _value(field, value, here, keep=field.keep_zero)
            if decoded is not None:
                out[field.name] = decoded
    return out


def _bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("expected a length-delimited field")
    return value


def _value(field: Field, value: int | bytes, path: str, *, keep: bool) -> Any:
    """The JSON value of one field; None for a zero scalar that JSON leaves out."""
    kind = field.kind
    if kind not in _SCALARS:
        return _message(_bytes(value), SCHEMA[kind], path + ".")
    if kind == "s":
        text = _bytes(value).decode()
        return text if text or keep else None
    if kind == "i":
        number = _signed(value) if isinstance(value, int) else 0
        return number if number or keep else None
    if kind == "b":
        return True if value else (False if keep else None)
    if kind == "y":
        raw = _bytes(value)
        return base64.b64encode(raw).decode() if raw or keep else None
    if kind in ("T", "M"):
        return _time(_bytes(value), micro=kind == "M")
    if kind == "Q":
        return str(_message(_bytes(value), _QUANTITY, path).get("string", "")) or None
    found = _message(_bytes(value), _INT_OR_STRING, path)
    return found.get("strVal", "") if found.get("type") == 1 else found.get("intVal", 0)


_QUANTITY = {1: Field("string", "s")}
_INT_OR_STRING = {
    1: Field("type", "i"),
    2: Field("intVal", "i", keep_zero=True),
    3: Field("strVal", "s"),
}
_TIMESTAMP = {1: Field("seconds", "i"), 2: Field("nanos", "i")}


def _time(data: bytes, *, micro: bool) -> str | None:
    """metav1.Time keeps whole seconds (its Unmarshal drops nanos), MicroTime microseconds; the
    zero time (empty or all zero) is left out."""
    found = _message(data, _TIMESTAMP, "")
    seconds, nanos = int(found.get("seconds", 0)), int(found.get("nanos", 0))
    if not seconds and not nanos:
        return None
    moment = datetime.fromtimestamp(seconds, UTC)
    if micro:
        return micro_time(moment.replace(microsecond=nanos // 1000))
    return rfc3339(moment)


def _entry(field: Field, value: int | bytes, path: str) -> tuple[str, Any]:
    inner = field.kind[1:-1]
    entry = _message(_bytes(value), {1: Field("key", "s"), 2: Field("value", "y")}, path)
    key = str(entry.get("key", ""))
    raw = base64.b64decode(entry.get("value", ""))
    if inner == "s":
        return key, raw.decode()
    if inner == "Q":
        return key, str(_message(raw, _QUANTITY, path).get("string", ""))
    return key, base64.b64encode(raw).decode()
