"""FORMAT.md is a specification: hold every number, table and example in it to the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

# reaches inside: FORMAT.md's numbers and tables are held to the modules' constants
from journal import (
    Event,
    catalog,
    catalogbase,
    catalogrecords,
    dictionary,
    index,
    log,
    manifest,
    metafile,
    payloads,
    record,
    segment,
    session,
)

DOC = (Path(__file__).resolve().parent.parent / "FORMAT.md").read_text()


def _block(tag: str) -> str:
    m = re.search(rf"```{tag}\n(.*?)```", DOC, re.S)
    assert m, f"FORMAT.md has no {tag} block"
    return m.group(1)


def _constants() -> dict[str, str]:
    out = {}
    for line in _block("format-constants").splitlines():
        if line.strip():
            key, value = (part.strip() for part in line.split("=", 1))
            out[key] = value
    return out


CODE_CONSTANTS = {
    "segment.magic": segment.SEGMENT_MAGIC.hex(),
    "segment.version": segment.SEGMENT_VERSION,
    "segment.header_size": segment.SEGMENT_HEADER_SIZE,
    "record.header_size": record.HEADER_SIZE,
    "record.type.checkpoint": record.CHECKPOINT,
    "record.type.transcript": record.TRANSCRIPT,
    "record.type.execution": record.EXECUTION,
    "record.type.event": record.EVENT,
    "record.type.commit": record.COMMIT,
    "record.type.catalog": record.CATALOG,
    "record.type.pad": record.PAD,
    "record.type.dictionary": record.DICT,
    "record.type.seal": record.SEAL,
    "record.type.loss": record.LOSS,
    "record.flag.zstd": record.FLAG_ZSTD,
    "record.flag.commit": record.FLAG_COMMIT,
    "record.flag.dictionary": record.FLAG_DICT,
    "record.compress_min": record.COMPRESS_MIN,
    "record.dict_compress_min": record.DICT_COMPRESS_MIN,
    "index.magic": index.INDEX_MAGIC.hex(),
    "index.version": index.INDEX_VERSION,
    "index.header_size": index.INDEX_HEADER_SIZE,
    "index.dense_entry_size": index.DENSE.size,
    "index.sparse_entry_size": index.SPARSE.size,
    "index.kind.events": index.KIND_EVENTS,
    "index.kind.checkpoints": index.KIND_CHECKPOINTS,
    "index.kind.transcripts": index.KIND_TRANSCRIPTS,
    "index.kind.executions": index.KIND_EXECUTIONS,
    "meta.magic": metafile.META_MAGIC.hex(),
    "meta.version": metafile.META_VERSION,
    "meta.header_size": metafile.META_HEADER_SIZE,
    "meta.kind.manifest": metafile.KIND_MANIFEST,
    "meta.kind.identity": metafile.KIND_IDENTITY,
    "meta.kind.snapshot": metafile.KIND_SNAPSHOT,
    "meta.kind.state": metafile.KIND_STATE,
    "meta.kind.intent": metafile.KIND_INTENT,
    "meta.kind.catalog_snapshot": metafile.KIND_CATALOG_SNAPSHOT,
    "log.kind.session": log.KIND_SESSION,
    "log.kind.catalog": log.KIND_CATALOG,
    "store.format": manifest.STORE_FORMAT,
    "catalog_base.magic": catalogbase.BASE_MAGIC.hex(),
    "catalog_base.version": catalogbase.BASE_VERSION,
    "catalog_base.header_size": catalogbase.HEADER.size,
    "catalog_base.footer_size": catalogbase.FOOTER.size,
    "catalog_base.block_bytes": catalogbase.BLOCK_BYTES,
    "catalog_base.block_level": catalogbase.BLOCK_LEVEL,
    "catalog_base.index_fanout": catalogbase.INDEX_FANOUT,
    "catalog_base.table.sessions": catalogrecords.T_SESSIONS,
    "catalog_base.table.order": catalogrecords.T_ORDER,
    "catalog_base.table.owners": catalogrecords.T_OWNERS,
    "catalog_base.table.parents": catalogrecords.T_PARENTS,
    "catalog_base.table.execs": catalogrecords.T_EXECS,
    "catalog_base.table.dirs": catalogrecords.T_DIRS,
    "catalog.delta_sessions": catalog.DELTA_SESSIONS,
    "catalog.delta_log_bytes": catalog.DELTA_LOG_BYTES,
    "catalog.delta_share": catalog.DELTA_SHARE,
    "catalog.delta_log_max": catalog.DELTA_LOG_MAX,
    "catalog_base.tmp_max_age": int(catalog.BASE_TMP_MAX_AGE),
}


def test_constants_block_matches_code() -> None:
    doc = _constants()
    assert set(doc) == set(CODE_CONSTANTS), "constants block and code name different things"
    for key, value in CODE_CONSTANTS.items():
        assert doc[key] == str(value), f"FORMAT.md says {key} = {doc[key]}, code has {value}"


def _table_after(heading: str) -> list[list[str]]:
    start = DOC.index(heading)
    rows = []
    started = False
    for line in DOC[start:].splitlines()[1:]:
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif started:
            break
    return rows[1:]  # drop the column titles


@pytest.mark.parametrize(
    "heading,size",
    [
        ("### Segment header", segment.SEGMENT_HEADER_SIZE),
        ("### Record frame", None),
        ("All four index files share one header", index.INDEX_HEADER_SIZE),
        ("Dense entries", index.DENSE.size),
        ("Sparse entries", index.SPARSE.size),
        ("written whole (temp file", metafile.META_HEADER_SIZE),
        ("#### Base header", catalogbase.HEADER.size),
        ("#### Base footer", catalogbase.FOOTER.size),
    ],
)
def test_byte_tables_are_contiguous_and_sized(heading: str, size: int | None) -> None:
    rows = _table_after(heading)
    offset = 0
    for row in rows:
        assert int(row[0]) == offset, f"{heading}: field {row[2]} should start at {offset}"
        if row[1].isdigit():
            offset += int(row[1])
    if size is not None:
        assert offset == size


def test_record_frame_table_matches_struct() -> None:
    rows = _table_after("### Record frame")
    fixed = sum(int(r[1]) for r in rows if r[1].isdigit())
    assert fixed == record.HEADER_SIZE == record.HEADER.size


@pytest.mark.parametrize(
    "name,cls",
    [
        ("CheckpointPayload", payloads.CheckpointPayload),
        ("TranscriptPayload", payloads.TranscriptPayload),
        ("ExecutionPayload", payloads.ExecutionPayload),
        ("EventPayload", payloads.EventPayload),
        ("CommitPayload", payloads.CommitPayload),
        ("DictionaryPayload", payloads.DictionaryPayload),
        ("LossPayload", payloads.LossPayload),
        ("CatalogRecord", catalogrecords.CatalogRecord),
        ("Directory", catalogbase.Directory),
        ("TableInfo", catalogbase.TableInfo),
        ("BaseMeta", catalogrecords.BaseMeta),
        ("BaseEntry", catalogrecords.BaseEntry),
    ],
)
def test_payload_tables_list_fields_in_order(name: str, cls: type[msgspec.Struct]) -> None:
    documented = [row[0] for row in _table_after(f"#### {name}")]
    assert documented == [f.name for f in msgspec.structs.fields(cls)]


def test_base_tables_match_the_code() -> None:
    """Each documented table: its id, its entry's fields (as many as the code's entry
    type has) and how many of them are its key."""
    rows = _table_after("#### Base tables")
    assert [int(r[0]) for r in rows] == sorted(catalogrecords.TABLES)
    for row in rows:
        entry, _, keys, _ = catalogrecords.TABLES[int(row[0])]
        fields = re.sub(r"\([^)]*\)", "", row[2]).split(",")
        assert len(fields) == len(entry.__args__), row  # type: ignore[attr-defined]
        assert int(row[3]) == keys, row


def test_a_real_base_has_the_documented_layout(tmp_path: Path) -> None:
    import struct
    import zlib

    import zstandard

    import journal

    with journal.open(tmp_path / "s") as st:
        st.save(journal.Checkpoint.empty("x", owner_id="o"))
        st.catalog.rewrite_base()
    data = (tmp_path / "s" / "catalog" / "base").read_bytes()
    assert data[:8] == b"JRNLCBAS" and struct.unpack_from("<HHI", data, 8) == (1, 0, 0)
    offset, length, crc, magic = struct.unpack_from("<QII8s", data, len(data) - 24)
    assert magic == b"JRNLCBAS" and offset + length == len(data) - 24
    assert zlib.crc32(data[offset : offset + length]) == crc
    meta, tables = msgspec.msgpack.decode(data[offset : offset + length])
    assert [t[0] for t in tables] == sorted(catalogrecords.TABLES)
    assert msgspec.msgpack.decode(meta)[3] == 1  # one session
    for table, entries, at, size, crc in tables:
        top = msgspec.msgpack.decode(data[at : at + size])
        assert zlib.crc32(data[at : at + size]) == crc
        index = []
        for page_at, page_size, page_crc, page_first, blocks in top:
            page = msgspec.msgpack.decode(data[page_at : page_at + page_size])
            assert zlib.crc32(data[page_at : page_at + page_size]) == page_crc
            assert len(page) == blocks <= catalogbase.INDEX_FANOUT and page[0][3] == page_first
            index.extend(page)
        found = []
        for block_at, block_size, block_crc, first in index:
            stored = data[block_at : block_at + block_size]
            assert zlib.crc32(stored) == block_crc
            block = msgspec.msgpack.decode(zstandard.ZstdDecompressor().decompress(stored))
            assert block[0][: len(first)] == first
            found.extend(block)
        assert len(found) == entries
        if table == catalogrecords.T_ORDER:
            assert found[0][2] == "x"


def test_snapshot_fields_documented() -> None:
    m = re.search(r"snapshot \(map, the `Head`\):(.*?)\n- state", DOC, re.S)
    assert m
    documented = re.findall(r"`(\w+)`", m.group(1))
    assert documented == [f.name for f in msgspec.structs.fields(session.Head)]


def test_dictionary_paragraph_matches_the_writer(tmp_path: Path) -> None:
    """The numbers FORMAT.md gives for the session dictionary, and a real DICT record."""
    para = DOC[DOC.index("**The session dictionary.**") :].split("\n\n")[0]
    flat = " ".join(para.split())
    assert f"at least {record.DICT_COMPRESS_MIN} bytes" in flat
    assert f"first {dictionary.SAMPLE_BYTES >> 10} KiB of payloads" in flat
    assert f"of at least {record.DICT_COMPRESS_MIN} bytes" in flat
    assert f"trains an {dictionary.SIZE >> 10} KiB dictionary" in flat
    assert f"(zstd level {dictionary.LEVEL})" in flat
    assert f"longer than {dictionary.SAMPLE_MAX >> 10} KiB, its first" in flat
    import random

    import journal
    from journal.inspect import replay

    rng = random.Random(3)
    words = ["the", "build", "failed", "because", "linker", "could", "not", "find", "libssl"]
    store = journal.open(tmp_path / "root")
    store.save(journal.Checkpoint.empty("x", owner_id="o"))

    def records() -> list[tuple[Any, int]]:
        return [(r, len(c)) for c in replay(store.session_dir("x")) for r in c]

    # The writer asks for training after every 32 KiB it writes, and a background
    # job (at low priority, dropped when the machine is busy) trains: append until
    # the DICT record is there, so the test does not depend on the machine's load.
    n = 0
    while n < 3000 and (n < 300 or not any(r.rtype == record.DICT for r, _ in records())):
        for _ in range(100):
            msg = {"type": "warning", "message": " ".join(rng.choice(words) for _ in range(40))}
            store.append_event("x", n, Event(msg=msg))
            n += 1
        store.spares.wait()
    recs = records()
    store.close()
    dicts = [(r, n) for r, n in recs if r.rtype == record.DICT]
    assert len(dicts) == 1
    rec, alone = dicts[0]
    assert alone == 1 and rec.flags == 0x02  # "a commit of its own ... flags are exactly 02"
    p = payloads.dictionary_decoder.decode(rec.payload)
    assert p.data[:4] == bytes.fromhex("37a430ec")  # "magic 37 a4 30 ec"
    after = [r for r, _ in recs if r.pos > rec.pos]
    assert after and all(r.flags == 0x07 for r in after)  # bits 0, 1 and 2


def _hexdump(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk).ljust(48)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hexes}  |{text}|")
    return "\n".join(lines) + "\n"


def test_worked_example_is_what_the_code_writes() -> None:
    event = Event(msg={"type": "warning", "message": "disk almost full"})
    payload = payloads.EventPayload(7, 1700000000000, event, [], [], False)
    data = record.frame(record.EVENT, payloads.encode(payload), commit=True)
    assert _block("worked-example") == _hexdump(data)
    assert len(data) == 69


def test_worked_segment_header_is_what_the_code_writes() -> None:
    data = segment.encode_segment_header(log.KIND_SESSION, 0)
    assert _block("worked-example-segment") == _hexdump(data)


def test_real_store_files_start_with_documented_magics(tmp_path: Path) -> None:
    import journal

    s = journal.open(tmp_path / "root")
    cp = journal.Checkpoint.empty("x", owner_id="o")
    s.save(cp)
    s.load("x")  # a new session's cache files are written by the first store that opens it
    s.close()
    root = tmp_path / "root"
    assert (root / "JOURNAL").read_bytes()[:8] == metafile.META_MAGIC
    sess = next((root / "sessions").iterdir())
    assert (sess / "SESSION").read_bytes()[:8] == metafile.META_MAGIC
    seg = next((sess / "log").iterdir())
    assert re.fullmatch(r"\d{20}\.seg", seg.name)
    assert seg.read_bytes()[:8] == segment.SEGMENT_MAGIC
    assert (sess / "events.idx").read_bytes()[:8] == index.INDEX_MAGIC


def test_page_decoder_reads_the_documented_transcript_layout() -> None:
    """transcript_page decodes TranscriptPayload bytes with items in one go: same fields."""
    plain = [f.name for f in msgspec.structs.fields(payloads.TranscriptPayload)]
    at_once = [f.name for f in msgspec.structs.fields(payloads.TranscriptItemsPayload)]
    assert plain == at_once
    raw = payloads.encode(
        payloads.TranscriptPayload(7, 1_700_000_000, [msgspec.Raw(payloads.encode({"a": [1]}))])
    )
    assert payloads.transcript_items_decoder.decode(raw).items == [{"a": [1]}]


@pytest.mark.parametrize(
    "ident",
    ["a", "Session-1", "../x", "/", "", "x" * 4096, "é🙂 UPPER lower", "__a__b__", "CON", "a\x00b"],
)
def test_directory_names_follow_section_1(ident: str) -> None:
    """`<slug>-<digest>`: the first 26 characters of the lowercase base32 encoding of
    SHA-256 of the id's UTF-8 bytes; at most 24 characters of the lowercased id with
    every run outside [a-z0-9_-] replaced by `_`, `_` stripped at both ends."""
    import base64
    import hashlib

    from journal.inspect import dir_name

    digest = base64.b32encode(hashlib.sha256(ident.encode("utf-8")).digest()).decode()
    slug = re.sub(r"[^a-z0-9_-]+", "_", ident.lower())[:24].strip("_")
    tag = digest.lower()[:26]
    assert dir_name(ident) == (f"{slug}-{tag}" if slug else tag)


def test_directory_names_follow_section_1_for_random_ids() -> None:
    """The same rule for 2000 random ids (the digest is taken 10 bits at a time)."""
    import base64
    import hashlib
    import random

    from journal.inspect import dir_name

    rng = random.Random(20261201)
    for _ in range(2000):
        ident = "".join(chr(rng.randrange(1, 0xD7FF)) for _ in range(rng.randrange(1, 40)))
        digest = base64.b32encode(hashlib.sha256(ident.encode("utf-8")).digest()).decode()
        slug = re.sub(r"[^a-z0-9_-]+", "_", ident.lower())[:24].strip("_")
        tag = digest.lower()[:26]
        assert dir_name(ident) == (f"{slug}-{tag}" if slug else tag), ident


def test_the_manifest_fields_are_the_documented_ones() -> None:
    line = next(x for x in DOC.splitlines() if x.startswith("- manifest (map):"))
    documented = re.findall(r"`(\w+)`", line.split(";")[0])
    assert documented == list(manifest.Manifest.__struct_fields__)
    policy = re.search(r"retention\s+policy \(map\): (.*?)\.", DOC, re.S)
    assert policy, "FORMAT.md does not describe the retention policy map"
    fields = re.findall(r"`(\w+)`", policy.group(1))
    assert fields == list(manifest.RetentionPolicy.__struct_fields__)


def test_erased_worked_example_is_what_compact_writes() -> None:
    from journal.erase import encoded_stub

    event = Event(msg={"type": "warning", "message": "disk almost full"})
    payload = payloads.EventPayload(7, 1700000000000, event, [], [], False)
    data = record.frame(record.EVENT, encoded_stub(payload, 3), commit=True, compress=False)
    assert _block("worked-example-erased") == _hexdump(data)
    # the trailing element is ignored: the stub decodes as the documented fields
    p = payloads.event_decoder.decode(data[record.HEADER_SIZE :])
    assert p.event.msg == {"type": "journal_erased", "erased_type": "warning"}


def test_erase_declaration_table_and_rule_kinds_match_the_code() -> None:
    from journal import erase

    rows = _table_after("**Erase declarations.**")
    decl = erase.erase_declaration(events=[1], ranges=[(1, 2)], types=["a"], checkpoints=[3])
    assert [r[0] for r in rows] == list(decl)
    section = DOC[DOC.index("**Erase declarations.**") : DOC.index("**Rewriting a segment.**")]
    flat = " ".join(section.split())
    kinds = re.search(r"folds? into the head \(([^:]*):", flat)
    assert kinds, "FORMAT.md section 11 lists the rule kinds"
    assert set(re.findall(r"`(\w+)`", kinds.group(1))) == erase.RULE_KINDS
    assert f'"type": "{erase.ERASED_TYPE}"' in flat and f'"{erase.ERASE_KEY}"' in flat


# ----------------------------------------------- section 14: the replica in a bucket
def _section_14() -> str:
    return DOC[DOC.index("## 14. The replica in an object store") :]


def _replica_constants() -> dict[str, str]:
    out = {}
    for line in _block("replica-constants").splitlines():
        if line.strip():
            key, value = (part.strip() for part in line.split("=", 1))
            out[key] = value
    return out


def test_replica_constants_block_matches_code() -> None:
    from journal import layout
    from journal.replica import chunk as ck
    from journal.replica import lease, shipper

    code = {
        "chunk.magic": ck.MAGIC.hex(),
        "chunk.version": ck.VERSION,
        "chunk.header_size": ck.HEADER_SIZE,
        "chunk.kind.begin": ck.KIND_BEGIN,
        "chunk.kind.data": ck.KIND_DATA,
        "chunk.kind.fence": ck.KIND_FENCE,
        "chunk.kind.delete": ck.KIND_DELETE,
        "chunk.slot_digits": len(layout.replica_chunk_key("", "d", 0).rsplit("/", 1)[1]),
        "merge_span": shipper.MERGE_SPAN,
        "lease.format": lease.LEASE_FORMAT,
        "head.format": ck.HEAD_FORMAT,
        "marker.format": ck.MARKER_FORMAT,
    }
    doc = _replica_constants()
    assert set(doc) == set(code), "replica-constants block and code name different things"
    for key, value in code.items():
        assert doc[key] == str(value), f"FORMAT.md says {key} = {doc[key]}, code has {value}"
    flat = " ".join(_section_14().split())
    assert f"every aligned span of {shipper.MERGE_SPAN} chunks" in flat
    assert f"at least {shipper.CHUNK_BYTES >> 20} MiB past its `start`" in flat


def _chunk_rows() -> list[list[str]]:
    rows = _table_after("#### Chunk header")
    assert rows, "FORMAT.md section 14 has no chunk header table"
    return rows


def test_chunk_header_table_is_the_struct() -> None:
    """Offsets contiguous, sizes those of chunk.HEADER's fields then CRC's, 128 in all."""
    from journal.replica import chunk as ck

    rows = _chunk_rows()
    assert rows[-1][2] == "body" and rows[-1][1] == "length"
    header = rows[:-1]
    offset = 0
    for row in header:
        assert int(row[0]) == offset, f"chunk header: {row[2]} should start at {offset}"
        offset += int(row[1])
    assert offset == ck.HEADER_SIZE == ck.HEADER.size + ck.CRC.size == int(rows[-1][0])
    codes = re.findall(r"(\d*)([a-zA-Z])", ck.HEADER.format + ck.CRC.format)
    sizes = [struct_size(count, code) for count, code in codes]
    assert [int(r[1]) for r in header] == sizes


def struct_size(count: str, code: str) -> int:
    import struct

    return struct.calcsize("<" + count + code)


def test_chunk_header_fields_are_where_the_table_says() -> None:
    """A chunk with a distinct value in every field, each read back at its documented
    offset and size (little-endian), and the magic, version and kinds as documented."""
    import hashlib
    import struct
    import zlib

    from journal.replica import chunk as ck

    body = bytes(range(200)) * 3
    c = ck.Chunk(
        kind=ck.KIND_DATA,
        n=0x0102030405060708,
        epoch=0x1112131415161718,
        segment_base=0x2122232425262728,
        start=0x3132333435363738,
        end=0x3132333435363738 + len(body),
        shipped_at_ms=0x4142434445464748,
        commits=0x51525354,
        writer=bytes(range(0xA0, 0xB0)),
        body=body,
    )
    data = ck.encode_chunk(c)
    want: dict[str, Any] = {
        "magic": ck.MAGIC,
        "version": ck.VERSION,
        "kind": c.kind,
        "flags": 0,
        "length": len(body),
        "n": c.n,
        "epoch": c.epoch,
        "segment_base": c.segment_base,
        "start": c.start,
        "end": c.end,
        "shipped_at_ms": c.shipped_at_ms,
        "commits": c.commits,
        "reserved": 0,
        "writer": c.writer,
        "sha256": hashlib.sha256(body).digest(),
        "crc": zlib.crc32(data[:120]),
    }
    rows = _chunk_rows()
    assert [r[2] for r in rows if r[2] != "reserved"] == [k for k in want if k != "reserved"] + [
        "body"
    ]
    for off_s, size_s, name, meaning in rows:
        if name == "body":
            assert data[int(off_s) :] == body
            continue
        off, size = int(off_s), int(size_s)
        raw = data[off : off + size]
        if isinstance(want[name], bytes):
            assert raw == want[name], name
        else:
            assert int.from_bytes(raw, "little") == want[name], name
        if name == "crc":
            assert meaning == f"CRC-32 of bytes 0..{off}"
    assert len(data) == ck.HEADER_SIZE + len(body)
    meanings = {r[2]: r[3] for r in rows}
    magic = re.search(r"`(.*?)`", meanings["magic"])
    assert magic and magic.group(1).replace("\\0", "\0").encode() == ck.MAGIC
    version = re.search(r"\((\d+)\)", meanings["version"])
    assert version and version.group(1) == str(ck.VERSION)
    kinds = {int(k): v for k, v in re.findall(r"(\d+) ([A-Z]+)", meanings["kind"])}
    assert kinds == ck.KIND_NAMES
    # The documented CRC range is what the decoder checks: a CRC over other bytes fails.
    bad = data[:120] + struct.pack("<I", zlib.crc32(data[:119])) + data[124:]
    from journal.errors import ReplicaCorruptionError

    with pytest.raises(ReplicaCorruptionError, match="CRC"):
        ck.decode_chunk(bad, key="k")


def test_kind_list_matches_the_code() -> None:
    from journal.replica import chunk as ck

    section = _section_14()
    listed = re.findall(r"^- (\d) ([A-Z]+):", section, re.M)
    assert {int(k): v for k, v in listed} == ck.KIND_NAMES


_KEY_VALUES: dict[str, Any] = {
    "dir": "s1-abcdefghijklmnopqrstuvwxyz",
    "n": 77,
    "first": 64,
    "last": 127,
    "scope_dir": "scope-aaaaaaaaaaaaaaaaaaaaaaaaaa",
    "key_dir": "key-bbbbbbbbbbbbbbbbbbbbbbbbbb",
    "at_ms": 1_700_000_000_123,
    "writer": "0123456789abcdef0123456789abcdef",
    "counter": 42,
}


def _documented_keys(prefix: str) -> list[str]:
    rows = _table_after("#### Replica objects")
    out = []
    for row in rows:
        pattern = re.fullmatch(r"`(.*)`", row[0])
        assert pattern, row
        text = pattern.group(1).replace("<prefix>/", prefix + "/" if prefix else "")
        out.append(re.sub(r"<(\w+)(:\w+)?>", r"{\1\2}", text).format(**_KEY_VALUES))
    return out


@pytest.mark.parametrize("prefix", ["", "a/b"])
def test_replica_key_names_are_layouts(prefix: str) -> None:
    """Every documented name, built with sample values, is what layout.py builds."""
    from journal import layout

    v = _KEY_VALUES
    built = [
        layout.replica_marker_key(prefix),
        layout.replica_chunk_key(prefix, v["dir"], v["n"]),
        layout.replica_merged_key(prefix, v["dir"], v["first"], v["last"]),
        layout.replica_lease_key(prefix, v["dir"]),
        layout.replica_floor_key(prefix, v["dir"]),
        layout.replica_head_key(prefix, v["dir"]),
        layout.replica_state_key(
            prefix, v["scope_dir"], v["key_dir"], v["at_ms"], v["writer"], v["counter"]
        ),
    ]
    assert _documented_keys(prefix) == built
    assert layout.parse_replica_slot(built[1]) == v["n"]
    assert layout.parse_replica_merged(built[2]) == (v["first"], v["last"])
    assert layout.parse_replica_state(built[6]) == (v["scope_dir"], v["key_dir"], v["at_ms"])


@pytest.mark.parametrize("name", ["Lease", "Head"])
def test_replica_json_tables_list_fields_in_order(name: str) -> None:
    from journal.replica import chunk as ck
    from journal.replica import lease

    cls = {"Lease": lease.Lease, "Head": ck.Head}[name]
    section = _section_14()
    at = section.index(f"{name} (`")
    rows = _table_after(section[at : section.index("\n", at)])
    assert [r[0] for r in rows] == [f.name for f in msgspec.structs.fields(cls)]


def test_replica_id_is_in_section_1_and_is_what_the_code_writes(tmp_path: Path) -> None:
    from journal import layout
    from journal.replica.lease import writer_id

    section_1 = DOC[DOC.index("## 1. Directory layout") : DOC.index("## 2. Constants")]
    line = next(x for x in section_1.splitlines() if x.strip().startswith(layout.REPLICA_ID_FILE))
    assert "32 lowercase" in line and "section 14" in section_1
    raw = writer_id(str(tmp_path))
    text = (tmp_path / layout.REPLICA_ID_FILE).read_text(encoding="ascii")
    assert re.fullmatch(r"[0-9a-f]{32}\n", text) and bytes.fromhex(text) == raw
    assert writer_id(str(tmp_path)) == raw  # created once
