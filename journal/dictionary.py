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
Training runs as a background job of the store once a writer has
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
from .record import DICT_COMPRESS_MIN, FLAG_COMMIT, Record

SAMPLE_BYTES = 32 << 10  # payload bytes sampled before training
SIZE = 8 << 10  # the trained dictionary's size
LEVEL = 3  # zstd level of training and of dictionary-compressed records below LARGE
LARGE = 8 << 10  # from this payload size, records are compressed at LARGE_LEVEL
LARGE_LEVEL = 1
"""Level 1 on a 50 KiB checkpoint costs about three quarters of level 3's time for the
same ratio (2.72 against 2.71 on prose); on a 1 KiB event it loses 2% of the ratio
for 1.4 us, so small records keep level 3."""
SAMPLE_MAX = 4 << 10  # of a longer payload, its first bytes are the sample
COVER_K, COVER_D = 512, 8  # the trainer's parameters (see `train`)


class SessionDictionary:
    """One session's dictionary, ready for use by any thread.

    The decompression side is digested before other threads see the object. The
    compression side is digested on first use, because readers never need it. zstd
    contexts must not be used by two threads at once, and each costs memory (96 KiB
    to decompress, 34 KiB to compress), so each call takes one from a pool of this
    dictionary's own and puts it back (compression has a pool per level: small and
    `LARGE` payloads): a pool holds as many as threads ever used the session at the
    same time, usually one, and goes with the session when it closes.
    """

    def __init__(self, data: bytes, pos: int, *, path: str = "", offset: int | None = None):
        try:
            zdict = zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_FULLDICT)
            dctx = zstandard.ZstdDecompressor(dict_data=zdict)  # digests it for decompression
        except zstandard.ZstdError as exc:
            raise CorruptionError(
                f"the session's zstd dictionary is not usable: {exc}", path=path, offset=offset
            ) from exc
        self.pos = pos  # log position of its DICT record
        self.data = data
        self.dict_id = zdict.dict_id()
        self._zdict = zdict
        # list.pop and list.append are atomic: the pools need no lock
        self._dctxs: list[Any] = [dctx]
        self._cctxs: list[Any] = []
        self._large_cctxs: list[Any] = []
        self._large_zdict: Any = None  # digested for LARGE_LEVEL on first use
        self._compress_lock = threading.Lock()
        self._compress_ready = False

    def compress(self, payload: bytes) -> bytes:
        large = len(payload) >= LARGE
        pool = self._large_cctxs if large else self._cctxs
        try:
            cctx = pool.pop()
        except IndexError:
            cctx = self._new_compressor(large)
        try:
            return bytes(cctx.compress(payload))
        finally:
            pool.append(cctx)

    def _new_compressor(self, large: bool) -> Any:
        """A compression context at the level for small or `large` payloads. Each
        level has its own digested copy of the dictionary: a context uses the level
        its dictionary was digested at, whatever level it is given."""
        with self._compress_lock:
            if large and self._large_zdict is None:
                zdict = zstandard.ZstdCompressionDict(
                    self.data, dict_type=zstandard.DICT_TYPE_FULLDICT
                )
                zdict.precompute_compress(level=LARGE_LEVEL)
                self._large_zdict = zdict
            elif not large and not self._compress_ready:
                self._zdict.precompute_compress(level=LEVEL)
                self._compress_ready = True
            zdict = self._large_zdict if large else self._zdict
        return zstandard.ZstdCompressor(
            level=LARGE_LEVEL if large else LEVEL,
            dict_data=zdict,
            write_checksum=False,
            write_content_size=True,
        )

    def decompress(self, stored: bytes, *, path: str, offset: int) -> bytes:
        try:
            dctx = self._dctxs.pop()
        except IndexError:
            dctx = zstandard.ZstdDecompressor(dict_data=self._zdict)
        try:
            return bytes(dctx.decompress(stored))
        except zstandard.ZstdError as exc:
            raise CorruptionError(
                f"payload does not decompress with the session's dictionary: {exc}",
                path=path,
                offset=offset,
            ) from exc
        finally:
            self._dctxs.append(dctx)

    def payload(self) -> bytes:
        return encode(DictionaryPayload(self.dict_id, self.data))


MISPLACED = "a dictionary record must be a commit of its own, uncompressed"


def well_placed(commit: list[Record]) -> bool:
    """Is this commit holding a DICT record the way FORMAT.md section 3 allows?"""
    return len(commit) == 1 and commit[0].flags == FLAG_COMMIT


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

    Paying means that compressing the samples with it saves at least a quarter of
    their bytes and at least twice the dictionary's own size. The dictionary is
    stored once per session, and later records resemble the samples only roughly.
    """
    raw = sum(len(s) for s in samples)
    try:
        corpus: list[bytes | bytearray | memoryview[int]] = list(samples)
        # Fixed cover parameters (segment size k, d-mer size d) instead of zstd's
        # search over them: 10 ms instead of 20-30 ms here, for the same ratio on
        # chat text, prose and tool output.
        zdict = zstandard.train_dictionary(SIZE, corpus, level=LEVEL, k=COVER_K, d=COVER_D)
        cctx = zstandard.ZstdCompressor(level=LEVEL, dict_data=zdict, write_checksum=False)
        packed = sum(min(len(s), len(cctx.compress(s))) for s in samples)
    except zstandard.ZstdError:
        return None  # too few or too uniform samples: zstd's trainer gives up
    data = bytes(zdict.as_bytes())
    saved = raw - packed
    if saved * 4 < raw or saved < 2 * len(data):
        return None
    return data


class Sampler:
    """The payloads one writer samples for training its session's dictionary.

    `samples` is None once the session has a dictionary or gave up on one (or never
    wants one); then nothing is sampled. The caller serialises calls: `add` runs
    under the session's write lock, the rest under its state lock.
    """

    def __init__(self, enabled: bool) -> None:
        self.samples: list[bytes] | None = [] if enabled else None
        self.sampled = 0  # bytes kept in `samples`
        self.since_asked = 0  # bytes seen since a training job was last asked for
        self.training = False  # a job took the samples and has not finished

    def add(self, payload: bytes) -> bool:
        """Keep `payload` (a prefix of a long one); True when a training job should be
        asked for: enough samples, `SAMPLE_BYTES` more since the last ask, none running."""
        samples = self.samples
        if samples is None or len(payload) < DICT_COMPRESS_MIN:  # never compressed with it
            return False
        # A prefix of a long payload samples it: one 50 KiB checkpoint alone would
        # otherwise fill the sample, and training wants many samples.
        size = min(len(payload), SAMPLE_MAX)
        if self.sampled < SAMPLE_BYTES:
            samples.append(payload[:size] if size < len(payload) else payload)
            self.sampled += size
        self.since_asked += size
        return (
            self.sampled >= SAMPLE_BYTES and self.since_asked >= SAMPLE_BYTES and not self.training
        )

    def asked(self) -> None:
        """A training job was asked for: the next ask waits for `SAMPLE_BYTES` more."""
        self.since_asked = 0

    def take(self) -> list[bytes] | None:
        """The samples for a training job, once there are enough and no other job has
        them (else None)."""
        samples = self.samples
        if samples is None or self.sampled < SAMPLE_BYTES or self.training:
            return None
        self.training = True
        return list(samples)

    def failed(self) -> None:
        """The job that took the samples stopped early (an error): a later one may try."""
        self.training = False

    def stop(self) -> None:
        """The session has a dictionary, or training found none worth keeping."""
        self.samples = None
        self.training = False
