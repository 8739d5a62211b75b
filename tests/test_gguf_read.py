"""The fast GGUF reader agrees with the ``gguf`` package's reader on the shipped target file:
every metadata value and every tensor's type, shape and bytes; a file that is not a GGUF is
refused with its magic named."""

from __future__ import annotations

import numpy as np
import pytest

from specpilot.engine.gguf_read import GGUFFormatError, read_gguf
from specpilot.engine.loader import default_target_path


def test_same_fields_and_tensors_as_gguf_reader() -> None:
    import gguf

    path = default_target_path()
    ref = gguf.GGUFReader(str(path))
    ours = read_gguf(path)
    assert set(ours.fields) == {k for k in ref.fields if not k.startswith("GGUF.")}
    for key, field in ref.fields.items():
        if key.startswith("GGUF."):  # the reader's own header pseudo-fields
            continue
        assert ours.fields[key] == field.contents(), key
    assert [t.name for t in ref.tensors] == list(ours.tensors)
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.tensor_type == t.tensor_type and mine.shape == tuple(int(d) for d in t.shape)
        assert mine.data.shape == t.data.shape and mine.data.dtype == t.data.dtype
        assert np.array_equal(mine.data, t.data), t.name


def test_not_a_gguf(tmp_path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 64)
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        read_gguf(bad)
