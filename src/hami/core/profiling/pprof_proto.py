"""A minimal encoder for pprof's profile.proto (github.com/google/pprof/proto/profile.proto).

Only what Python profiles need: sample types, samples with location stacks (leaf first),
locations with one line each, functions with name/filename/start line, one mapping, the string
table ("" first), time, duration, period and the default sample type. Encoded by hand: the wire
format is small and this avoids a generated module.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from dataclasses import dataclass

# profile.proto field numbers
_P_SAMPLE_TYPE, _P_SAMPLE, _P_MAPPING, _P_LOCATION, _P_FUNCTION, _P_STRING_TABLE = 1, 2, 3, 4, 5, 6
_P_TIME_NANOS, _P_DURATION_NANOS, _P_PERIOD_TYPE, _P_PERIOD, _P_DEFAULT_SAMPLE_TYPE = 9, 10, 11, 12, 14
_WIRE_VARINT, _WIRE_LEN = 0, 2


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 two's complement, as protobuf encodes negative int64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int_field(field: int, value: int) -> bytes:
    return _key(field, _WIRE_VARINT) + _varint(value) if value else b""


def _len_field(field: int, payload: bytes) -> bytes:
    return _key(field, _WIRE_LEN) + _varint(len(payload)) + payload


def _packed(field: int, values: Sequence[int]) -> bytes:
    return _len_field(field, b"".join(_varint(v) for v in values)) if values else b""


@dataclass(frozen=True)
class Frame:
    """One stack frame: the function's display name, its file and first line, the current line."""

    name: str
    filename: str
    start_line: int
    line: int


class ProfileBuilder:
    """Accumulates samples (stacks leaf-first + one value per sample type) and encodes them."""

    def __init__(self, sample_types: Sequence[tuple[str, str]], period_type: tuple[str, str],
                 period: int, default_sample_type: str | None = None) -> None:
        self._strings: dict[str, int] = {"": 0}
        self._functions: dict[tuple[str, str, int], int] = {}
        self._locations: dict[tuple[int, int], int] = {}
        self._samples: dict[tuple[int, ...], list[int]] = {}
        self._sample_types = [(self._s(t), self._s(u)) for t, u in sample_types]
        self._period_type = (self._s(period_type[0]), self._s(period_type[1]))
        self._period = period
        self._default = self._s(default_sample_type) if default_sample_type else 0
        self.time_nanos = 0
        self.duration_nanos = 0

    def _s(self, text: str) -> int:
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self._strings)
        return index

    def _location(self, frame: Frame) -> int:
        fkey = (frame.name, frame.filename, frame.start_line)
        fid = self._functions.get(fkey)
        if fid is None:
            fid = self._functions[fkey] = len(self._functions) + 1
        lkey = (fid, frame.line)
        lid = self._locations.get(lkey)
        if lid is None:
            lid = self._locations[lkey] = len(self._locations) + 1
        return lid

    def add(self, stack: Sequence[Frame], values: Sequence[int]) -> None:
        """Add `values` to the sample for `stack` (leaf first); equal stacks are merged."""
        if len(values) != len(self._sample_types):
            raise ValueError(f"expected {len(self._sample_types)} values, got {len(values)}")
        key = tuple(self._location(f) for f in stack)
        total = self._samples.get(key)
        if total is None:
            self._samples[key] = list(values)
        else:
            for i, v in enumerate(values):
                total[i] += v

    def encode(self) -> bytes:
        out = bytearray()
        for t, u in self._sample_types:
            out += _len_field(_P_SAMPLE_TYPE, _int_field(1, t) + _int_field(2, u))
        for locs, values in self._samples.items():
            out += _len_field(_P_SAMPLE, _packed(1, locs) + _packed(2, values))
        # One mapping that says symbols are already resolved, so pprof does not try to symbolize.
        out += _len_field(_P_MAPPING, _int_field(1, 1) + b"".join(_int_field(f, 1) for f in (7, 8, 9)))
        for (fid, line), lid in self._locations.items():
            line_msg = _int_field(1, fid) + _int_field(2, line)
            out += _len_field(_P_LOCATION, _int_field(1, lid) + _int_field(2, 1) + _len_field(4, line_msg))
        for (name, filename, start), fid in self._functions.items():
            name_i, file_i = self._s(name), self._s(filename)
            out += _len_field(_P_FUNCTION, _int_field(1, fid) + _int_field(2, name_i) + _int_field(3, name_i)
                              + _int_field(4, file_i) + _int_field(5, start))
        for text in self._strings:  # dicts keep insertion order: index order
            out += _len_field(_P_STRING_TABLE, text.encode())
        out += _int_field(_P_TIME_NANOS, self.time_nanos) + _int_field(_P_DURATION_NANOS, self.duration_nanos)
        period_type = _int_field(1, self._period_type[0]) + _int_field(2, self._period_type[1])
        out += _len_field(_P_PERIOD_TYPE, period_type)
        out += _int_field(_P_PERIOD, self._period) + _int_field(_P_DEFAULT_SAMPLE_TYPE, self._default)
        return bytes(out)

    def encode_gzip(self) -> bytes:
        return gzip.compress(self.encode(), compresslevel=6)
