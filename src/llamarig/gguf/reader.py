"""A bounded, header-only GGUF reader.

The ``gguf`` package's GGUFReader builds numpy views for every array element, which for a real
tokenizer (about 150 000 tokens and as many merges) costs far more than the 100 ms budget of a
plan. This reader walks the same format (gguf-py/gguf/gguf_reader.py, ggml/src/gguf.cpp) but:

- decodes only scalars and small arrays; large arrays are skipped and kept as ``ArrayInfo``
  (element type and count), string arrays by walking their length prefixes;
- validates every count and length against the bytes left in the file before using it, so a
  truncated or hostile header gives a ``GGUFError`` with the offset, never a huge allocation;
- never reads tensor data: tensor extents are checked against the file size only;
- parses a prefix of a file as well as the whole file (``parse_header``): when the prefix ends
  before the tensor table does, it raises ``HeaderIncomplete`` with the bytes it needs, so a
  remote reader (llamarig.hub) can fetch a longer range and try again.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from llamarig.errors import GGUFError, ModelNotFoundError
from llamarig.gguf.ggml_types import TYPE_SIZES, type_name
from llamarig.i18n import _

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
#: arrays with more elements than this are not decoded (the tokenizer); their count is kept.
ARRAY_DECODE_LIMIT = 8192
#: GGML_MAX_DIMS (ggml/include/ggml.h)
MAX_DIMS = 4

# GGUF value types (gguf-py/gguf/constants.py GGUFValueType)
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = range(10)
_UINT64, _INT64, _FLOAT64 = 10, 11, 12

_SCALAR_FMT: dict[int, str] = {
    _UINT8: "<B",
    _INT8: "<b",
    _UINT16: "<H",
    _INT16: "<h",
    _UINT32: "<I",
    _INT32: "<i",
    _FLOAT32: "<f",
    _BOOL: "<?",
    _UINT64: "<Q",
    _INT64: "<q",
    _FLOAT64: "<d",
}
_SCALAR_STRUCT = {k: struct.Struct(v) for k, v in _SCALAR_FMT.items()}
_NUMPY_CODES = {
    _UINT8: "B", _INT8: "b", _UINT16: "H", _INT16: "h", _UINT32: "I", _INT32: "i",
    _FLOAT32: "f", _BOOL: "?", _UINT64: "Q", _INT64: "q", _FLOAT64: "d",
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class ArrayInfo:
    """A header array that was not decoded (too long to be useful for planning)."""

    element_type: str
    count: int


#: a metadata value as the reader keeps it: a scalar, a decoded array (of scalars or of arrays), or
#: the ArrayInfo of an array too large to decode
MetadataValue: TypeAlias = str | int | float | bool | ArrayInfo | list["MetadataValue"]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: str
    shape: tuple[int, ...]
    n_bytes: int
    offset: int  # absolute offset in its file


class HeaderIncomplete(Exception):
    """The bytes given end before the header does; ``needed`` bytes from the start are required
    (at least; the next field may ask for more)."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"header needs at least {needed} bytes")
        self.needed = needed


@dataclass(frozen=True)
class GGUFHeader:
    path: Path | str  # a local path, or the reference a remote header was read from
    version: int
    file_size: int
    alignment: int
    data_offset: int
    metadata: dict[str, MetadataValue] = field(repr=False)
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    warnings: tuple[str, ...] = ()
    #: where the tensor table ends: the bytes a reader needs to parse this header
    header_bytes: int = 0


_TYPE_LABEL = {
    _UINT8: "u8", _INT8: "i8", _UINT16: "u16", _INT16: "i16", _UINT32: "u32", _INT32: "i32",
    _FLOAT32: "f32", _BOOL: "bool", _STRING: "str", _ARRAY: "array", _UINT64: "u64",
    _INT64: "i64", _FLOAT64: "f64",
}


class _Cursor:
    __slots__ = ("buf", "off", "end", "limit", "path")

    def __init__(self, buf: memoryview | bytes, path: Path | str, limit: int | None = None) -> None:
        self.buf = buf
        self.off = 0
        self.end = len(buf)
        #: the file's size; more than ``end`` when ``buf`` is only a prefix of the file
        self.limit = self.end if limit is None else limit
        self.path = path

    def more(self, upto: int) -> None:
        """Raise HeaderIncomplete when ``buf`` is a prefix and the file has ``upto`` bytes."""
        if self.end < upto <= self.limit:
            raise HeaderIncomplete(upto)

    def fail(self, problem: str) -> GGUFError:
        return GGUFError(self.path, _("{problem} (at byte {off})").format(problem=problem, off=self.off))

    def need(self, n: int, what: str) -> None:
        if n >= 0:
            self.more(self.off + n)
        if n < 0 or self.off + n > self.end:
            raise self.fail(
                _("truncated header: {what} needs {n} bytes but only {left} remain").format(what=what, n=n, left=self.end - self.off)
            )

    def u32(self, what: str) -> int:
        self.need(4, what)
        v: int = _U32.unpack_from(self.buf, self.off)[0]
        self.off += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        v: int = _U64.unpack_from(self.buf, self.off)[0]
        self.off += 8
        return v

    def string(self, what: str) -> str:
        n = self.u64(f"{what} length")
        self.need(n, what)
        raw = bytes(self.buf[self.off : self.off + n])
        self.off += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int, what: str) -> None:
        """Skip ``count`` length-prefixed strings without decoding them."""
        buf, off, end = self.buf, self.off, self.end
        unpack = _U64.unpack_from
        # Fast path: no per-item checks (about 0.1 µs per string). A length that runs past the
        # end makes the next unpack raise, or leaves off > end; then the checked walk below
        # finds the exact item for the error message.
        try:
            for _i in range(count):
                off += 8 + unpack(buf, off)[0]
            if off <= end:
                self.off = off
                return
        except struct.error:
            pass
        off = self.off
        for i in range(count):
            if off + 8 > end:
                self.off = off
                self.more(off + 8)
                raise self.fail(_("truncated header: {what}[{i}] length").format(what=what, i=i))
            off += 8 + unpack(buf, off)[0]
            if off > end:
                self.more(off)
                self.off = off - 8
                raise self.fail(_("truncated header: {what}[{i}] runs past the end of the file").format(what=what, i=i))
        self.off = off

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            if depth > 2:
                raise self.fail(_("{what}: arrays nested more than 2 deep").format(what=what))
            etype = self.u32(f"{what} element type")
            count = self.u64(f"{what} element count")
            return self.array(etype, count, what, depth)
        st = _SCALAR_STRUCT.get(vtype)
        if st is None:
            raise self.fail(_("{what}: unknown value type {vtype}").format(what=what, vtype=vtype))
        self.need(st.size, what)
        v = st.unpack_from(self.buf, self.off)[0]
        self.off += st.size
        return v

    def array(self, etype: int, count: int, what: str, depth: int) -> Any:
        if etype in _SCALAR_STRUCT:
            size = _SCALAR_STRUCT[etype].size
            self.need(count * size, f"{what} ({count} x {_TYPE_LABEL[etype]})")
            if count > ARRAY_DECODE_LIMIT:
                self.off += count * size
                return ArrayInfo(_TYPE_LABEL[etype], count)
            vals = struct.unpack_from(f"<{count}{_NUMPY_CODES[etype]}", self.buf, self.off)
            self.off += count * size
            return list(vals)
        if etype == _STRING:
            # every string costs at least its 8-byte length prefix
            self.need(count * 8, f"{what} ({count} strings)")
            if count > ARRAY_DECODE_LIMIT:
                self.skip_strings(count, what)
                return ArrayInfo("str", count)
            return [self.string(f"{what}[{i}]") for i in range(count)]
        if etype == _ARRAY:
            self.need(count * 12, f"{what} ({count} arrays)")
            if count > ARRAY_DECODE_LIMIT:
                raise self.fail(_("{what}: {count} nested arrays is not a plausible GGUF header").format(what=what, count=count))
            return [self.value(_ARRAY, f"{what}[{i}]", depth + 1) for i in range(count)]
        raise self.fail(_("{what}: unknown array element type {etype}").format(what=what, etype=etype))


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read the metadata and tensor table of one GGUF file. Raises GGUFError on bad input."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise ModelNotFoundError(p, _("no such file")) from None
    except OSError as e:
        raise GGUFError(p, _("cannot read: {error}").format(error=e.strerror or e)) from None
    if p.is_dir():
        raise GGUFError(p, _("is a directory, not a GGUF file"))
    if size < 24:
        raise GGUFError(p, _("not a GGUF file: only {size} bytes").format(size=size))
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
            if magic != GGUF_MAGIC:
                raise GGUFError(p, _("not a GGUF file: magic is {magic!r}, expected b'GGUF'").format(magic=magic))
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise GGUFError(p, _("cannot read: {error}").format(error=e.strerror or e)) from None
    try:
        with memoryview(mm) as buf:
            return _parse(buf, p, size)
    finally:
        mm.close()


def parse_header(buf: bytes | memoryview, size: int, where: Path | str) -> GGUFHeader:
    """Parse a header from ``buf``, the first bytes of a GGUF file of ``size`` bytes (the whole
    file or a prefix of it). Raises HeaderIncomplete when ``buf`` ends before the tensor table
    does, GGUFError when the header is bad."""
    if size < 24:
        raise GGUFError(where, _("not a GGUF file: only {size} bytes").format(size=size))
    magic = bytes(buf[:4])
    if len(magic) < 4:
        raise HeaderIncomplete(24)
    if magic != GGUF_MAGIC:
        raise GGUFError(where, _("not a GGUF file: magic is {magic!r}, expected b'GGUF'").format(magic=magic))
    with memoryview(buf) as view:
        return _parse(view, where, size)


def _parse(buf: memoryview, p: Path | str, size: int) -> GGUFHeader:
    c = _Cursor(buf, p, size)
    c.off = 4
    version = c.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version and version & 0xFFFF == 0:
            raise GGUFError(p, _("big-endian GGUF is not supported"))
        raise GGUFError(p, _("unsupported GGUF version {version} (supported: 2, 3)").format(version=version))
    n_tensors = c.u64("tensor count")
    n_kv = c.u64("metadata count")
    # each KV needs at least a key length (8) + a value type (4) + 1 byte; each tensor info 8+4+4+8
    c.need(n_kv * 13, f"{n_kv} metadata entries")
    c.need(n_tensors * 24, f"{n_tensors} tensor infos")

    metadata: dict[str, MetadataValue] = {}
    warnings: list[str] = []
    for i in range(n_kv):
        key = c.string(f"metadata[{i}] key")
        vtype = c.u32(f"metadata '{key}' type")
        metadata[key] = c.value(vtype, f"metadata '{key}'")

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(p, _("general.alignment {alignment!r} is not a power of two").format(alignment=alignment))

    raw: list[tuple[str, int, tuple[int, ...], int]] = []
    for i in range(n_tensors):
        name = c.string(f"tensor[{i}] name")
        n_dims = c.u32(f"tensor '{name}' n_dims")
        if n_dims > MAX_DIMS:
            raise c.fail(_("tensor '{name}' has {n_dims} dimensions (max {max_dims})").format(name=name, n_dims=n_dims, max_dims=MAX_DIMS))
        c.need(8 * n_dims, f"tensor '{name}' shape")
        shape = struct.unpack_from(f"<{n_dims}Q", buf, c.off)
        c.off += 8 * n_dims
        ttype = c.u32(f"tensor '{name}' type")
        offset = c.u64(f"tensor '{name}' offset")
        raw.append((name, ttype, tuple(shape), offset))

    header_bytes = c.off
    data_offset = (c.off + alignment - 1) // alignment * alignment
    tensors: list[TensorInfo] = []
    for name, ttype, shape, offset in raw:
        tname = type_name(ttype)
        n_el = 1
        for d in shape:
            n_el *= d
        if tname is None:
            warnings.append(f"tensor '{name}' has ggml type {ttype} unknown to this llamarig")
            tname, n_bytes = f"type{ttype}", 0
        else:
            block, bsize = TYPE_SIZES[tname]
            if shape and shape[0] % block:
                raise GGUFError(p, _("tensor '{name}': ne0={shape} is not a multiple of {tname}'s block {block}").format(name=name, shape=shape[0], tname=tname, block=block))
            n_bytes = n_el // block * bsize
        start = data_offset + offset
        if start + n_bytes > size:
            raise GGUFError(
                p,
                _("truncated: tensor '{name}' data ends at byte {value} but the file has {size} bytes").format(name=name, value=start + n_bytes, size=size),
            )
        tensors.append(TensorInfo(name, tname, shape, n_bytes, start))

    return GGUFHeader(
        path=p,
        version=version,
        file_size=size,
        alignment=alignment,
        data_offset=data_offset,
        metadata=metadata,
        tensors=tuple(tensors),
        warnings=tuple(warnings),
        header_bytes=header_bytes,
    )
