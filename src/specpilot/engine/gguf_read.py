"""A fast GGUF reader: metadata as Python values, tensors as memory-mapped arrays.

``gguf.GGUFReader`` builds a numpy memmap view for every part of every metadata field; on
SmolLM2's GGUF (49,152 tokens and 48,900 merges) that takes ~6 s of a ~10 s server start.
This reader walks the same layout (GGUF v2/v3: header, key/value pairs, tensor infos, aligned
data) with ``struct`` and maps only the tensor data, in ~0.1 s. Values equal what
``GGUFReader.fields[key].contents()`` returns (a test compares them on the shipped file);
tensor arrays have the shapes ``gguf.quants.dequantize`` expects.

    >>> from specpilot.engine.loader import default_target_path
    >>> g = read_gguf(default_target_path())
    >>> g.fields["general.architecture"], g.tensors["token_embd.weight"].shape
    ('llama', (576, 49152))
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specpilot.errors import InputFileError

_MAGIC = b"GGUF"
# value type -> struct format (scalars); 8 = string, 9 = array
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_NUMPY = {
    0: np.uint8,
    1: np.int8,
    2: np.uint16,
    3: np.int16,
    4: np.uint32,
    5: np.int32,
    6: np.float32,
    7: np.bool_,
    10: np.uint64,
    11: np.int64,
    12: np.float64,
}


class GGUFFormatError(InputFileError):
    """The file is not a GGUF this reader understands (names the offset and what was found)."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]  # GGUF order (innermost first), as GGUFReader's ``shape``
    data: np.ndarray  # memory-mapped; bytes per row for quantized types


@dataclass(frozen=True)
class GGUFFile:
    fields: dict[str, Any]
    tensors: dict[str, GGUFTensor]


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> Any:
        (v,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v

    def string(self) -> str:
        n = self.take("Q")
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, count = self.take("I"), self.take("Q")
            if itype in _NUMPY:
                arr: np.ndarray = np.frombuffer(
                    self.buf, dtype=_NUMPY[itype], count=count, offset=self.pos
                )
                self.pos += arr.nbytes
                return arr.tolist()
            return [self.value(itype) for _ in range(count)]
        raise GGUFFormatError(f"unknown GGUF value type {vtype} at byte {self.pos}")


def read_gguf(path: str | Path) -> GGUFFile:
    """Metadata and memory-mapped tensors of a GGUF file; a truncated or damaged one is a
    ``GGUFFormatError`` naming the file and the byte where it ends."""
    p = Path(path)
    if not p.is_file():
        raise GGUFFormatError(f"{p}: no such GGUF file", fix="check the path")
    try:
        return _read(p)
    except (struct.error, ValueError, IndexError, KeyError) as exc:
        if isinstance(exc, GGUFFormatError):
            raise
        raise GGUFFormatError(
            f"{p}: not a complete GGUF file ({p.stat().st_size} bytes; {exc})",
            fix="copy or download the file again (it is truncated or damaged)",
        ) from None


def _read(path: Path) -> GGUFFile:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import quant_shape_to_byte_shape

    mm = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(memoryview(mm))  # type: ignore[arg-type]  # a memmap is a buffer
    if bytes(mm[:4]) != _MAGIC:
        raise GGUFFormatError(f"{path}: not a GGUF file (magic {bytes(mm[:4])!r})")
    cur.pos = 4
    version = cur.take("I")
    if version not in (2, 3):
        raise GGUFFormatError(f"{path}: GGUF version {version} (this reader knows 2 and 3)")
    n_tensors, n_kv = cur.take("Q"), cur.take("Q")
    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        fields[key] = cur.value(cur.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        dims = tuple(cur.take("Q") for _ in range(cur.take("I")))
        infos.append((name, dims, GGMLQuantizationType(cur.take("I")), cur.take("Q")))
    align = int(fields.get("general.alignment", 32))
    start = -(-cur.pos // align) * align
    tensors = {}
    for name, dims, qtype, offset in infos:
        n = int(np.prod(dims))
        np_dims = tuple(reversed(dims))
        dtype: np.dtype[Any]
        if qtype == GGMLQuantizationType.F32:
            dtype, count = np.dtype(np.float32), n
        elif qtype == GGMLQuantizationType.F16:
            dtype, count = np.dtype(np.float16), n
        else:
            block, size = GGML_QUANT_SIZES[qtype]
            dtype, count = np.dtype(np.uint8), n * size // block
            np_dims = quant_shape_to_byte_shape(np_dims, qtype)
        at = start + offset
        data = np.frombuffer(mm, dtype=dtype, count=count, offset=at).reshape(np_dims)
        tensors[name] = GGUFTensor(name, qtype, dims, data)
    return GGUFFile(fields, tensors)
