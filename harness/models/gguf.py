"""A GGUF model file's header, read in pure Python (no weights loaded, no llama.cpp): its metadata
and the context length the model was trained with. Used by the llama.cpp backends and by anything
that must know a local model's limits before it is started."""

from __future__ import annotations

import os
import struct
from typing import Any, BinaryIO

from harness.errors import ModelError

_GGUF_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _read(fh: BinaryIO, n: int) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise ValueError("truncated GGUF header")
    return data


def _read_string(fh: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", _read(fh, 8))
    return _read(fh, length).decode("utf-8", errors="replace")


def _skip_value(fh: BinaryIO, vtype: int) -> None:
    if vtype == _GGUF_STRING:
        (length,) = struct.unpack("<Q", _read(fh, 8))
        fh.seek(length, os.SEEK_CUR)
    elif vtype == _GGUF_ARRAY:
        itype, count = struct.unpack("<IQ", _read(fh, 12))
        if itype in _GGUF_SCALARS:
            fh.seek(struct.calcsize(_GGUF_SCALARS[itype]) * count, os.SEEK_CUR)
        else:
            for _ in range(count):
                _skip_value(fh, itype)
    elif vtype in _GGUF_SCALARS:
        fh.seek(struct.calcsize(_GGUF_SCALARS[vtype]), os.SEEK_CUR)
    else:
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The scalar and string key/values of a GGUF file's header (arrays are skipped).

    Reads only the header, so it is fast even for large models. Raises ModelError if the file is
    not GGUF.
    """
    meta: dict[str, Any] = {}
    try:
        with open(path, "rb") as fh:
            if _read(fh, 4) != b"GGUF":
                raise ModelError(f"{path} is not a GGUF model file")
            (version,) = struct.unpack("<I", _read(fh, 4))
            if version == 1:
                _, kv_count = struct.unpack("<II", _read(fh, 8))
            else:
                _, kv_count = struct.unpack("<QQ", _read(fh, 16))
            for _ in range(kv_count):
                key = _read_string(fh)
                (vtype,) = struct.unpack("<I", _read(fh, 4))
                if vtype == _GGUF_STRING:
                    meta[key] = _read_string(fh)
                elif vtype in _GGUF_SCALARS:
                    fmt = _GGUF_SCALARS[vtype]
                    (meta[key],) = struct.unpack(fmt, _read(fh, struct.calcsize(fmt)))
                else:
                    _skip_value(fh, vtype)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    except (ValueError, struct.error) as exc:
        raise ModelError(f"cannot read the GGUF header of {path}: {exc}") from None
    return meta


def gguf_trained_context(path: str | os.PathLike[str]) -> int | None:
    """``<arch>.context_length`` from the GGUF header (the context the model was trained with)."""
    meta = read_gguf_metadata(path)
    arch = meta.get("general.architecture", "llama")
    value = meta.get(f"{arch}.context_length")
    return int(value) if value else None
