"""A session's zstd dictionary: trained on its first records, stored in its own log.

Agent sessions are mostly small records: a chat message or an event is a few
hundred bytes. Compressed on its own, such a record gains little, because zstd has
nothing earlier to refer back to. Compressing across records (whole commits or
segments) would cost random access. A dictionary trained on the session's first
records gives each later record the session's vocabulary: its JSON keys, its ids,
the words it uses. Each record still decompresses on its own. We measured 2.2x on
prose and code, and 3x or more on repetitive tool output (FORMAT.md section 3).

The dictionary is a DICT record in the session's log (its own commit). A copy of
the session directory therefore always holds the dictionary its records need, and
the dictionary comes before every record that uses it. A session has at most one.
Training runs in the background (`Store._train_dictionary`) once a writer has
sampled `SAMPLE_BYTES` of payloads. A dictionary that does not pay for itself on
those samples is not kept.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import zstandard

from .errors import CorruptionError
from .payloads import DictionaryPayload, dictionary_decoder, encode
from .record import DICT_COMPRESS_MIN

SAMPLE_BYTES = 32 << 10  # payload bytes sampled before training
SAMPLE_MIN = DICT_COMPRESS_MIN  # shorter payloads are neither sampled nor compressed with it
SIZE = 8 << 10  # the trained dictionary's size
LEVEL = 3  # zstd level of dictionary-compressed records



class SessionDictionary:
    """One session's dictionary, ready for use by any thread.

    The dictionary is digested for compression and for decompression before other
    threads see the object, and each thread has its own zstd contexts, because
    zstd contexts must not be shared between threads.
    """

    def __init__(self, data: bytes, pos: int, *, path: str = "", offset: int | None = None):
        try:
            zdict = zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_FULLDICT)
            zdict.precompute_compress(level=LEVEL)
            # One round trip digests the decompression side as well, and checks the
            # dictionary actually works.
            probe = zstandard.ZstdCompressor(level=LEVEL, dict_data=zdict).compress(b"journal")
            if zstandard.ZstdDecompressor(dict_data=zdict).decompress(probe) != b"journal":
                raise zstandard.ZstdError("round trip changed the data")
        except zstandard.ZstdError as exc:
            raise CorruptionError(
                f"the session's zstd dictionary is not usable: {exc}", path=path, offset=offset
            ) from exc
        self.pos = pos  # log position of its DICT record
        self.data = data
        self.dict_id = zdict.dict_id()
        self._zdict = zdict
        self._local = threading.local()

    def compress(self, payload: bytes) -> bytes:
        cctx = getattr(self._local, "cctx", None)
        if cctx is None:
            cctx = zstandard.ZstdCompressor(
                level=LEVEL, dict_data=self._zdict, write_checksum=False, write_content_size=True
            )
            self._local.cctx = cctx
        return bytes(cctx.compress(payload))

    def decompress(self, stored: bytes, *, path: str, offset: int) -> bytes:
        dctx: Any = getattr(self._local, "dctx", None)
        if dctx is None:
            dctx = zstandard.ZstdDecompressor(dict_data=self._zdict)
            self._local.dctx = dctx
        try:
            return bytes(dctx.decompress(stored))
        except zstandard.ZstdError as exc:
            raise CorruptionError(
                f"payload does not decompress with the session's dictionary: {exc}",
                path=path,
                offset=offset,
            ) from exc

    def payload(self) -> bytes:
        return encode(DictionaryPayload(self.dict_id, self.data))


def from_record(payload: bytes, pos: int, *, path: str, offset: int) -> SessionDictionary:
    """The dictionary a DICT record at `pos` carries (`CorruptionError` if it is none)."""
    try:
        p = dictionary_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise CorruptionError(
            f"dictionary record does not decode: {exc}", path=path, offset=offset
        ) from exc
    d = SessionDictionary(p.data, pos, path=path, offset=offset)
    if d.dict_id != p.dict_id:
        raise CorruptionError(
            f"dictionary record names id {p.dict_id}, its dictionary has {d.dict_id}",
            path=path,
            offset=offset,
        )
    return d


def train(samples: list[bytes]) -> bytes | None:
    """A dictionary for payloads like `samples`, or None when none pays for itself.

    Paying means that compressing the samples with it saves more than a quarter of
    their bytes and more than twice the dictionary's own size. The dictionary is
    stored once per session, and later records resemble the samples only roughly.
    """
    raw = sum(len(s) for s in samples)
    try:
        corpus: list[bytes | bytearray | memoryview[int]] = list(samples)
        zdict = zstandard.train_dictionary(SIZE, corpus, level=LEVEL)
        cctx = zstandard.ZstdCompressor(level=LEVEL, dict_data=zdict, write_checksum=False)
        packed = sum(min(len(s), len(cctx.compress(s))) for s in samples)
    except zstandard.ZstdError:
        return None  # too few or too uniform samples: zstd's trainer gives up
    data = bytes(zdict.as_bytes())
    saved = raw - packed
    if saved * 4 < raw or saved < 2 * len(data):
        return None
    return data
