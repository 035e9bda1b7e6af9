"""A paged, sorted, immutable file of tables: the catalog's base (FORMAT.md section 13).

The catalog (catalog.py) keeps only the records appended after its base in
memory; everything before is read from this file a block at a time, so opening
and paging cost the same at a thousand sessions as at a million. The file holds
several tables, each a sequence of entries sorted by key. An entry is a tuple of
key fields followed by one value (bytes the catalog decodes itself). Entries are
cut into blocks of about `BLOCK_BYTES`; each table has a block index (the
offset, length, CRC-32 and first key of each block) that is read on the table's
first use and kept, and a block is read, checked against its CRC and decoded
only when a scan reaches it (the last `CACHED_BLOCKS` stay decoded).

    header     16 bytes: magic "JRNLCBAS", version (u16), two reserved zeros
    blocks     each a zstd frame of a msgpack array of entries [key..., value]
    indexes    per table, index pages (a msgpack array of [offset, length, crc,
               first key] per block, `INDEX_FANOUT` blocks each), then its top
               index (an array of [offset, length, crc, first key, blocks] per page)
    directory  msgpack array [meta (bin), [[table, entries, offset, length, crc]...]]
    footer     24 bytes: directory offset (u64), length (u32), CRC-32 (u32), magic

Written once, in key order, by a stream (`BaseWriter`), to a temporary name,
fsynced and renamed into place: a reader never sees a partial base, and one that
is torn, damaged or of another version fails its checks (`BaseDamaged`) and is
ignored by the catalog, which rebuilds it. Nothing here knows what the tables
mean.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
import zstandard

from . import fsio
from .errors import CorruptionError, StorageError

BASE_MAGIC = b"JRNLCBAS"
BASE_VERSION = 1
HEADER = struct.Struct("<8sHHI")  # magic, version, 0, 0
FOOTER = struct.Struct("<QII8s")  # directory offset, directory length, directory crc, magic
BLOCK_BYTES = 16 << 10  # a block is cut once its entries reach this many bytes
BLOCK_LEVEL = 1  # zstd level of a block (summaries are maps: field names compress well)
CACHED_BLOCKS = 128  # decoded blocks kept per open base
WRITE_BYTES = 1 << 20  # a writer's buffer
INDEX_FANOUT = 512  # blocks per index page

Entry = tuple[Any, ...]


class BaseDamaged(CorruptionError):
    """The base file fails a check (torn, damaged, another version): rebuild it."""


class TableInfo(msgspec.Struct, array_like=True):
    table: int
    entries: int
    offset: int
    length: int
    crc: int


class Directory(msgspec.Struct, array_like=True):
    meta: bytes
    tables: list[TableInfo]


_encode = msgspec.msgpack.Encoder().encode
_decode_directory = msgspec.msgpack.Decoder(Directory).decode


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


class BaseWriter:
    """Writes a base file table by table, each from entries given in key order."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create {path}: {exc.strerror}") from exc
        self._pos = 0
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._tables: list[TableInfo] = []
        self._zstd = zstandard.ZstdCompressor(level=BLOCK_LEVEL)
        self._write(HEADER.pack(BASE_MAGIC, BASE_VERSION, 0, 0))

    def _write(self, data: bytes) -> None:
        self._buffer.append(data)
        self._buffered += len(data)
        self._pos += len(data)
        if self._buffered >= WRITE_BYTES:
            self._flush()

    def _flush(self) -> None:
        data = b"".join(self._buffer)
        fsio.pwrite(self._fd, data, self._pos - len(data), self.path)
        self._buffer, self._buffered = [], 0

    def _put(self, data: bytes) -> tuple[int, int, int]:
        span = (self._pos, len(data), zlib.crc32(data))
        self._write(data)
        return span

    def _block(self, entries: list[bytes]) -> tuple[int, int, int]:
        return self._put(self._zstd.compress(_array_header(len(entries)) + b"".join(entries)))

    def table(self, table: int, entries: Iterable[Entry], keys: int) -> None:
        """Write one table; `keys`: how many leading fields of an entry are its key."""
        index: list[tuple[int, int, int, Entry]] = []
        pending: list[bytes] = []
        size = count = 0
        first: Entry = ()
        for entry in entries:
            data = _encode(entry)
            if not pending:
                first = entry[:keys]
            pending.append(data)
            size += len(data)
            count += 1
            if size >= BLOCK_BYTES:
                index.append((*self._block(pending), first))
                pending, size = [], 0
        if pending:
            index.append((*self._block(pending), first))
        top = []
        for p in range(0, len(index), INDEX_FANOUT):
            page = index[p : p + INDEX_FANOUT]
            top.append((*self._put(_encode(page)), page[0][3], len(page)))
        offset, length, crc = self._put(_encode(top))
        self._tables.append(TableInfo(table, count, offset, length, crc))

    def finish(self, meta: bytes) -> None:
        """Write the directory and footer and make the file durable (not yet renamed)."""
        offset, length, crc = self._put(_encode(Directory(meta, self._tables)))
        self._write(FOOTER.pack(offset, length, crc, BASE_MAGIC))
        self._flush()
        fsio.sync_file(self._fd, self.path)
        os.close(self._fd)

    def abort(self) -> None:
        """Close and remove the unfinished file."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class Table:
    """One table of an open base: its two-level block index, and scans over its entries.

    A table's top index (read on first use) has one entry per index page; an index
    page (read when a scan needs it, cached with the blocks) has one entry per block,
    `INDEX_FANOUT` blocks a page. Opening a table therefore reads a few entries per
    hundred thousand sessions, not one per block."""

    def __init__(self, base: Base, info: TableInfo, entry: Any, key: Any) -> None:
        self.base, self.entries, self.id = base, info.entries, info.table
        raw = base.read(info.offset, info.length, info.crc)
        try:
            top = msgspec.msgpack.decode(raw, type=list[tuple[int, int, int, key, int]])
        except msgspec.DecodeError as exc:
            msg = f"catalog base: table {info.table} index: {exc}"
            raise BaseDamaged(msg, path=base.path) from exc
        self.pages = [(off, length, crc) for off, length, crc, _, _ in top]
        self.page_keys: list[Entry] = [k for _, _, _, k, _ in top]
        self.blocks = sum(n for *_, n in top)
        self._decode_page = msgspec.msgpack.Decoder(list[tuple[int, int, int, key]]).decode
        self._decode = msgspec.msgpack.Decoder(list[entry]).decode

    def page(self, p: int) -> tuple[list[tuple[int, int, int]], list[Entry]]:
        """Index page `p`: the spans and first keys of its blocks."""
        return self.base.page(self, p)

    def decode_page(self, raw: bytes) -> tuple[list[tuple[int, int, int]], list[Entry]]:
        try:
            entries = self._decode_page(raw)
        except msgspec.DecodeError as exc:
            raise BaseDamaged(
                f"catalog base: table {self.id} index: {exc}", path=self.base.path
            ) from exc
        return [(off, n, crc) for off, n, crc, _ in entries], [k for *_, k in entries]

    def span(self, i: int) -> tuple[int, int, int]:
        return self.page(i // INDEX_FANOUT)[0][i % INDEX_FANOUT]

    def block(self, i: int) -> list[Entry]:
        return self.base.block(self, i)

    def decode(self, stored: bytes) -> list[Entry]:
        try:
            return self._decode(_decompressor().decompress(stored))
        except (msgspec.DecodeError, zstandard.ZstdError) as exc:
            raise BaseDamaged(f"catalog base: table {self.id}: {exc}", path=self.base.path) from exc

    def _last_below(self, key: Entry) -> int:
        """The last block whose first key is below `key` (-1: none)."""
        p = bisect.bisect_left(self.page_keys, key) - 1
        if p < 0:
            return -1
        return p * INDEX_FANOUT + bisect.bisect_left(self.page(p)[1], key) - 1

    def _last_at_or_below(self, key: Entry) -> int:
        """The last block whose first key is `key` or below (0 when none is)."""
        p = bisect.bisect_right(self.page_keys, key) - 1
        if p < 0:
            return 0
        return p * INDEX_FANOUT + max(bisect.bisect_right(self.page(p)[1], key) - 1, 0)

    def descending(self, before: Entry | None) -> Iterator[Entry]:
        """Entries whose key is below `before` (all with None), greatest first."""
        i = self.blocks - 1 if before is None else self._last_below(before)
        if i < 0:
            return
        block = self.block(i)
        j = len(block) if before is None else bisect.bisect_left(block, before)
        yield from reversed(block[:j])
        for k in range(i - 1, -1, -1):
            yield from reversed(self.block(k))

    def ascending(self, start: Entry) -> Iterator[Entry]:
        """Entries whose key is `start` or above, least first."""
        if not self.blocks:
            return
        i = self._last_at_or_below(start)
        for k in range(i, self.blocks):
            block = self.block(k)
            j = bisect.bisect_left(block, start) if k == i else 0
            yield from block[j:]


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's zstd decompressor (one is not safe across threads)."""
    d: zstandard.ZstdDecompressor | None = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstandard.ZstdDecompressor()
    return d


class Base:
    """An open base file (kept open: it is never written again)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise BaseDamaged(f"catalog base: cannot open: {exc.strerror}", path=path) from exc
        try:
            st = os.fstat(self.fd)
            self.identity = (st.st_dev, st.st_ino)
            self.size = st.st_size
            self._check_ends()
        except BaseException:
            os.close(self.fd)
            raise
        self._tables: dict[int, Table] = {}
        # Decoded blocks (key (table, i)) and index pages (key (table, -1 - p)).
        self._blocks: collections.OrderedDict[tuple[int, int], Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _check_ends(self) -> None:
        if self.size < HEADER.size + FOOTER.size:
            raise BaseDamaged("catalog base: too short", path=self.path)
        magic, version, _, _ = HEADER.unpack(self._pread(0, HEADER.size))
        if magic != BASE_MAGIC or version != BASE_VERSION:
            raise BaseDamaged(f"catalog base: not version {BASE_VERSION}", path=self.path)
        offset, length, crc, magic = FOOTER.unpack(
            self._pread(self.size - FOOTER.size, FOOTER.size)
        )
        if magic != BASE_MAGIC or offset + length > self.size - FOOTER.size:
            raise BaseDamaged("catalog base: no footer", path=self.path)
        try:
            self.directory = _decode_directory(self.read(offset, length, crc))
        except msgspec.DecodeError as exc:
            raise BaseDamaged(f"catalog base: directory: {exc}", path=self.path) from exc
        self.meta = self.directory.meta

    def _pread(self, offset: int, length: int) -> bytes:
        try:
            data = os.pread(self.fd, length, offset)
        except OSError as exc:
            raise BaseDamaged(f"catalog base: read: {exc.strerror}", path=self.path) from exc
        if len(data) != length:
            raise BaseDamaged("catalog base: cut short", path=self.path, offset=offset)
        return data

    def read(self, offset: int, length: int, crc: int) -> bytes:
        data = self._pread(offset, length)
        if zlib.crc32(data) != crc:
            raise BaseDamaged("catalog base: checksum mismatch", path=self.path, offset=offset)
        return data

    def table(self, table: int, entry: Any, key: Any) -> Table:
        """Table `table`, whose entries decode as `entry` and keys as `key` (tuple types)."""
        found = self._tables.get(table)
        if found is None:
            info = next((t for t in self.directory.tables if t.table == table), None)
            if info is None:
                raise BaseDamaged(f"catalog base: no table {table}", path=self.path)
            found = self._tables[table] = Table(self, info, entry, key)
        return found

    def block(self, table: Table, i: int) -> list[Entry]:
        found = self._cached((table.id, i))
        if found is None:
            found = self._keep((table.id, i), table.decode(self.read(*table.span(i))))
        return found  # type: ignore[no-any-return]

    def page(self, table: Table, p: int) -> tuple[list[tuple[int, int, int]], list[Entry]]:
        found = self._cached((table.id, -1 - p))
        if found is None:
            found = self._keep((table.id, -1 - p), table.decode_page(self.read(*table.pages[p])))
        return found  # type: ignore[no-any-return]

    def _cached(self, key: tuple[int, int]) -> Any:
        with self._lock:
            found = self._blocks.get(key)
            if found is not None:
                self._blocks.move_to_end(key)
            return found

    def _keep(self, key: tuple[int, int], value: Any) -> Any:
        with self._lock:
            self._blocks[key] = value
            if len(self._blocks) > CACHED_BLOCKS:
                self._blocks.popitem(last=False)
        return value

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
