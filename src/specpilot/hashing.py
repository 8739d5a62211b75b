"""The one cached file hash: sha256 of a file's bytes, remembered per (path, mtime, size), so a
pilot hashing the same 100 MB model for every arm reads it once. A leaf (stdlib only).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "f"; _ = p.write_bytes(b"abc")
    >>> file_sha256(p)[:16]
    'ba7816bf8f01cfea'
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_CACHE: dict[tuple[str, float, int], str] = {}


def file_sha256(path: str | Path) -> str:
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_mtime, st.st_size)
    if key not in _CACHE:
        h = hashlib.sha256()
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _CACHE[key] = h.hexdigest()
    return _CACHE[key]
