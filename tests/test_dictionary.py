"""The session dictionary (FORMAT.md section 3): trained on a session's first payloads,
stored in its own log as a DICT record, used by the records after it, read back by
every way in (warm, cold through the snapshot, cold from the log alone, verify, a
copy of the directory), and loud when damaged."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from faults import flip_byte
from helpers import checkpoint

# reaches inside: the DICT record and where the snapshot says it is (FORMAT.md section 3)
import journal
from journal import Event, EventPageRequest
from journal import dictionary as jdict
from journal.inspect import SEVERITY_DATA, replay, session_path, verify_store
from journal.jobs import at_low_priority
from journal.metafile import KIND_SNAPSHOT, read_meta, write_meta
from journal.record import (
    DICT,
    EVENT,
    FLAG_COMMIT,
    FLAG_DICT,
    FLAG_ZSTD,
    HEADER,
    HEADER_SIZE,
    frame,
)
from journal.segment import SEGMENT_HEADER_SIZE
from journal.sessionstate import Head

SENTENCE = (
    "the build failed because the linker could not find libssl on the runner image so "
    "we pinned the version and reran the pipeline which then timed out on the tests"
)
WORDS = SENTENCE.split(" ")


def text(rng: random.Random, n: int = 40) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat_event(rng: random.Random, n: int) -> Event:
    return Event(msg={"type": "warning", "message": f"turn {n}: {text(rng)}"})


def write_events(store: journal.Store, sid: str, count: int, seed: int = 1) -> list[str]:
    """Append `count` compressible events (a checkpoint first when the session is new);
    return their messages."""
    rng = random.Random(seed)
    if store.load(sid) is None:
        store.save(checkpoint(sid, 0, [{"role": "user", "content": "hi"}]))
    out = []
    for n in range(count):
        ev = chat_event(rng, n)
        store.append_event(sid, 1_700_000_000_000 + n, ev)
        out.append(ev.msg["message"])
    return out


def data_findings(root: Path) -> list[Any]:
    """What `journal verify` reports as damaged data (not caches, not torn tails)."""
    return [f for _, found in verify_store(str(root)) for f in found if f.severity == SEVERITY_DATA]


def messages(store: journal.Store, sid: str, *, dense: bool = True) -> list[str]:
    """Every event's message, oldest first, read through newest-first pages (with
    `dense`, the sequences must be 1..n: no accepted loss skipped numbers)."""
    got: list[tuple[int, str]] = []
    before = None
    while True:
        page = store.event_page(sid, EventPageRequest(limit=37, before_sequence=before))
        got += [(e.sequence, e.event.msg["message"]) for e in page.events]
        if page.next_before_sequence is None:
            if dense:
                assert [s for s, _ in sorted(got)] == list(range(1, len(got) + 1))
            return [m for _, m in sorted(got)]
        before = page.next_before_sequence


def log_records(store: journal.Store, sid: str) -> list[tuple[int, int, int, int]]:
    """(position, type, flags, records in its commit) of every committed record."""
    return [
        (rec.pos, rec.rtype, rec.flags, len(commit))
        for commit in replay(store.session_dir(sid))
        for rec in commit
    ]


def dictionary_records(store: journal.Store, sid: str) -> list[tuple[int, int, int, int]]:
    return [r for r in log_records(store, sid) if r[1] == DICT]


def segment_path(store: journal.Store, sid: str) -> Path:
    segs = sorted((Path(store.session_dir(sid)) / "log").glob("*.seg"))
    assert len(segs) == 1
    return segs[0]


def trained_store(root: Path, sid: str = "s", before: int = 200, after: int = 100) -> Any:
    """A store whose session has a dictionary: `before` events sampled, trained in the
    background, then `after` more events written with it."""
    store = journal.open(root)
    texts = write_events(store, sid, before)
    store.spares.wait()  # the background training, then its DICT commit
    texts += write_events(store, sid, after, seed=2)
    return store, texts


def test_a_session_gets_one_dictionary_and_later_records_use_it(tmp_path: Path) -> None:
    store, texts = trained_store(tmp_path / "root")
    try:
        recs = log_records(store, "s")
        dicts = [r for r in recs if r[1] == DICT]
        assert len(dicts) == 1
        pos, _, flags, in_commit = dicts[0]
        assert flags == FLAG_COMMIT and in_commit == 1  # a commit of its own, not compressed
        before = [r for r in recs if r[0] < pos and r[1] == EVENT]
        after = [r for r in recs if r[0] > pos and r[1] == EVENT]
        assert not any(r[2] & FLAG_DICT for r in before)
        assert len(after) >= 100
        # nearly every later event is compressed with it (each ~250 bytes)
        assert sum(1 for r in after if r[2] == FLAG_COMMIT | FLAG_ZSTD | FLAG_DICT) >= 95
        assert messages(store, "s") == texts
        # the dictionary's commit does not count as an event, nor move any sequence
        assert store.event_page("s", EventPageRequest(limit=1)).latest_sequence == len(texts)
    finally:
        store.close()


def test_stats_count_the_dictionary_and_date_its_commit(tmp_path: Path) -> None:
    from journal.inspect import session_stats

    store, _ = trained_store(tmp_path / "root")
    sdir = store.session_dir("s")
    store.close()
    stats = session_stats(sdir)
    assert stats.by_type["dictionary"].records == 1
    assert stats.by_type["event"].compressed_records >= 95
    assert [day for day, _, _ in stats.growth if day == "?"] == []
    assert sum(c for _, c, _ in stats.growth) == stats.commits


def test_every_way_in_reads_records_compressed_with_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store, texts = trained_store(root)
    sdir = Path(store.session_dir("s"))
    dict_pos = dictionary_records(store, "s")[0][0]
    store.flush()  # a snapshot that names the dictionary's position
    store.close()
    head = msgspec.msgpack.decode(read_meta(str(sdir / "snapshot"), KIND_SNAPSHOT), type=Head)
    assert head.dict_pos == dict_pos
    # cold, through the snapshot and index files: no scan of the log, and the
    # dictionary read from where the snapshot says
    with journal.open(root) as again:
        sess = again.open_sessions.get("s")
        # reaches inside: what the session read from its snapshot is its own
        assert sess is not None and sess._snapshot_covered == head.covered > dict_pos
        assert sess.log.dictionary is not None and sess.log.dictionary.pos == dict_pos
        assert messages(again, "s") == texts
        assert again.load("s") is not None
        # and a writer that opened that way compresses with it
        texts += write_events(again, "s", 20, seed=5)
        newest = [r for r in log_records(again, "s") if r[1] == EVENT][-20:]
        assert all(r[2] & FLAG_DICT for r in newest)
    # cold, from the log alone
    for name in ("snapshot", "events.idx", "checkpoints.idx"):
        (sdir / name).unlink()
    with journal.open(root, read_only=True) as reader:
        assert messages(reader, "s") == texts
    # a copy of the directory in another store
    other = tmp_path / "other"
    journal.open(other).close()
    shutil.copytree(sdir, other / "sessions" / sdir.name)
    with journal.open(other) as copied:
        assert messages(copied, "s") == texts
        pass
    assert data_findings(other) == []


def test_a_snapshot_that_names_no_dictionary_record_is_not_used(tmp_path: Path) -> None:
    # reaches inside: damages the snapshot's dictionary position

    root = tmp_path / "root"
    store, texts = trained_store(root)
    store.flush()
    sdir = Path(store.session_dir("s"))
    store.close()
    path = str(sdir / "snapshot")
    head = msgspec.msgpack.decode(read_meta(path, KIND_SNAPSHOT), type=Head)
    head.dict_pos += 10  # inside the DICT record: no record starts there
    write_meta(path, KIND_SNAPSHOT, msgspec.msgpack.encode(head), durable=False)
    for _ in range(2):  # and the next open, after this one rewrote the caches
        with journal.open(root) as again:
            assert messages(again, "s") == texts
            again.flush()
    assert data_findings(root) == []


def test_it_makes_small_records_far_smaller(tmp_path: Path) -> None:
    sizes = {}
    for use in (True, False):
        root = tmp_path / f"root-{use}"
        store = journal.open(root, dictionary=use)
        write_events(store, "s", 150)
        store.spares.wait()
        write_events(store, "s", 1000, seed=2)
        seg = segment_path(store, "s")
        store.close()
        sizes[use] = len(seg.read_bytes().rstrip(b"\0"))
    assert sizes[False] > 2 * sizes[True], sizes


def test_incompressible_samples_train_no_dictionary() -> None:
    rng = random.Random(5)
    samples = [rng.randbytes(300) for _ in range(120)]
    assert jdict.train(samples) is None
    alike = [json.dumps({"message": text(rng)}).encode() for _ in range(150)]
    data = jdict.train(alike)
    assert data is not None and len(data) <= jdict.SIZE


def test_a_dictionary_that_does_not_pay_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried: list[int] = []

    def refuse(samples: list[bytes]) -> None:
        tried.append(len(samples))
        return None

    monkeypatch.setattr(jdict, "train", refuse)
    store = journal.open(tmp_path / "root")
    try:
        texts = write_events(store, "s", 300)
        store.spares.wait()
        texts += write_events(store, "s", 300, seed=2)
        store.spares.wait()
        assert len(tried) == 1  # asked once, then this writer stopped sampling
        assert dictionary_records(store, "s") == []
        assert messages(store, "s") == texts
    finally:
        store.close()


def test_a_dropped_training_job_is_asked_for_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = journal.open(tmp_path / "root")
    try:
        run_soon = store.jobs.run_soon
        asked: list[object] = []

        def drop_first_training(job: Any) -> None:
            # reaches inside: tells the training job from the others
            if getattr(job, "func", None) == store.session_jobs.train_dictionary:
                asked.append(job)
                if len(asked) == 1:
                    return  # as when more than MAX_JOBS wait: the oldest goes
            run_soon(job)

        monkeypatch.setattr(store.jobs, "run_soon", drop_first_training)
        write_events(store, "s", 150)  # ~37 KiB: enough samples, the job dropped
        store.spares.wait()
        assert len(asked) == 1 and dictionary_records(store, "s") == []
        write_events(store, "s", 150, seed=2)  # another 32 KiB later: asked again
        store.spares.wait()
        assert len(asked) == 2
        assert len(dictionary_records(store, "s")) == 1
    finally:
        store.close()


def test_close_does_not_wait_for_a_training_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    started, release = threading.Event(), threading.Event()
    real_train = jdict.train

    def slow_train(samples: list[bytes]) -> bytes | None:
        started.set()
        release.wait(60)  # a starved or slow training
        return real_train(samples)

    monkeypatch.setattr(jdict, "train", slow_train)
    root = tmp_path / "root"
    store = journal.open(root)
    texts = write_events(store, "s", 200)
    assert started.wait(30)
    store.close()  # returns although the training has not finished
    assert not release.is_set()
    release.set()
    with journal.open(root, dictionary=False) as after:
        assert dictionary_records(after, "s") == []  # nothing written after close
        assert messages(after, "s") == texts


def test_at_low_priority_returns_raises_and_gives_up() -> None:
    import threading

    # reaches inside: the training job's priority is what this test checks

    assert at_low_priority(lambda: 41 + 1, lambda: False) == 42
    with pytest.raises(ZeroDivisionError):
        at_low_priority(lambda: 1 // 0, lambda: False)
    hold = threading.Event()
    assert at_low_priority(lambda: hold.wait(60), lambda: True) is None
    hold.set()
    if sys.platform.startswith("linux"):
        seen: list[int] = []

        def nice_of_this_thread() -> int:
            return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        assert at_low_priority(nice_of_this_thread, lambda: False) >= 10
        seen.append(nice_of_this_thread())
        assert seen[0] < 10  # the caller's own priority is unchanged


def test_a_failed_training_job_lets_a_later_one_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real_train = jdict.train

    def fail_once(samples: list[bytes]) -> bytes | None:
        calls.append(len(samples))
        if len(calls) == 1:
            raise OSError("simulated failure")
        return real_train(samples)

    monkeypatch.setattr(jdict, "train", fail_once)
    store = journal.open(tmp_path / "root")
    try:
        write_events(store, "s", 150)
        store.spares.wait()
        assert len(calls) == 1 and dictionary_records(store, "s") == []
        write_events(store, "s", 150, seed=2)
        store.spares.wait()
        assert len(calls) == 2 and len(dictionary_records(store, "s")) == 1
    finally:
        store.close()


def test_small_payloads_are_not_sampled(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "root")
    try:
        store.save(checkpoint("s", 0, []))
        for n in range(2000):  # 2000 tiny events: far more bytes than the sample size
            store.append_event("s", n, Event(msg={"type": "warning", "message": "x"}))
        store.spares.wait()
        assert dictionary_records(store, "s") == []
    finally:
        store.close()


def test_a_store_without_dictionaries_writes_none(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "root", dictionary=False)
    try:
        write_events(store, "s", 400)
        store.spares.wait()
        assert dictionary_records(store, "s") == []
    finally:
        store.close()


def test_dictionary_false_writes_without_the_one_a_session_has(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store, texts = trained_store(root, after=20)
    store.close()
    with journal.open(root, dictionary=False) as plain:
        texts += write_events(plain, "s", 50, seed=4)
        newest = [r for r in log_records(plain, "s") if r[1] == EVENT][-50:]
        assert not any(r[2] & FLAG_DICT for r in newest)
        assert messages(plain, "s") == texts  # the older ones, compressed with it, too


def test_saves_and_forks_use_it_too(tmp_path: Path) -> None:
    store, _ = trained_store(tmp_path / "root", after=0)
    rng = random.Random(9)
    try:
        context: list[Any] = [{"role": "user", "content": "hi"}]
        for seq in range(1, 30):
            context = [*context, {"role": "assistant", "content": text(rng)}]
            store.save_with_events(
                checkpoint("s", seq, context),
                [{"role": "assistant", "content": text(rng)}],
                None,
                [],
            )
        recs = log_records(store, "s")
        dict_pos = dictionary_records(store, "s")[0][0]
        compressed = [r for r in recs if r[0] > dict_pos and r[2] & FLAG_DICT]
        assert len(compressed) >= 29 * 2  # each save's checkpoint and transcript batch
        assert store.load("s").context == context
        assert store.checkpoint_at("s", 10).context == context[:11]
        store.fork_at("s", 20, "child")
        assert store.load("child").context == context[:21]
        with journal.open(tmp_path / "root") as cold:
            assert cold.load("child").context == context[:21]
            assert cold.checkpoint_at("s", 20).context == context[:21]
    finally:
        store.close()


# ------------------------------------------------------------------ damage


def _frame_at(seg: Path, pos: int) -> tuple[int, int, int, int]:
    """(file offset, payload length, type, flags) of the record at log position `pos`."""
    data = seg.read_bytes()
    off = SEGMENT_HEADER_SIZE + pos
    _, length, rtype, flags = HEADER.unpack_from(data, off)
    return off, length, rtype, flags


def test_a_damaged_dictionary_is_reported_not_guessed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store, _ = trained_store(root)
    dict_pos = dictionary_records(store, "s")[0][0]
    seg = segment_path(store, "s")
    store.close()
    off, length, rtype, _ = _frame_at(seg, dict_pos)
    assert rtype == DICT
    flip_byte(str(seg), off + HEADER_SIZE + length // 2)
    with journal.open(root) as damaged:
        with pytest.raises(journal.CorruptionError) as err:
            messages(damaged, "s")
        assert err.value.path == str(seg)
    assert data_findings(root) != []


def test_a_record_that_claims_a_missing_dictionary_is_corruption(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = journal.open(root, dictionary=False)
    write_events(store, "s", 5)
    seg = segment_path(store, "s")
    store.close()
    # Rewrite the last event's frame as "compressed with the dictionary" (a valid CRC).
    with journal.open(root, read_only=True) as reader:
        last = [r for r in log_records(reader, "s") if r[1] == EVENT][-1]
    off, length, _, flags = _frame_at(seg, last[0])
    data = bytearray(seg.read_bytes())
    payload = bytes(data[off + HEADER_SIZE : off + HEADER_SIZE + length])
    forged = frame(EVENT, payload, commit=True, compress=False)
    forged = bytearray(forged)
    forged[9] = flags | FLAG_ZSTD | FLAG_DICT
    forged[0:4] = zlib.crc32(bytes(forged[4:])).to_bytes(4, "little")
    data[off : off + len(forged)] = forged
    seg.write_bytes(bytes(data))
    with (
        journal.open(root) as damaged,
        pytest.raises(journal.CorruptionError, match="no dictionary record precedes it"),
    ):
        messages(damaged, "s")


def test_a_second_dictionary_is_corruption(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store, _ = trained_store(root, after=3)
    first = dictionary_records(store, "s")[0][0]
    seg = segment_path(store, "s")
    store.close()
    off, length, _, _ = _frame_at(seg, first)
    record = seg.read_bytes()[off : off + HEADER_SIZE + length]
    data = bytearray(seg.read_bytes())
    end = len(bytes(data).rstrip(b"\0"))
    data[end : end + len(record)] = record  # the same DICT record again, at the end
    seg.write_bytes(bytes(data))
    with (
        journal.open(root, read_only=True) as damaged,
        pytest.raises(journal.CorruptionError, match="second dictionary"),
    ):
        damaged.load("s")
        messages(damaged, "s")
    assert data_findings(root) != []


# ------------------------------------------------------------ concurrency

CHILD = r"""
import sys, random
sys.path.insert(0, sys.argv[3])
import journal
from test_dictionary import write_events
store = journal.open(sys.argv[1])
write_events(store, sys.argv[2], 200, seed=11)
store.spares.wait()
ok = any(r for r in __import__("test_dictionary").dictionary_records(store, sys.argv[2]))
store.close()
print("dict" if ok else "none")
"""


def test_two_processes_share_the_first_dictionary_written(tmp_path: Path) -> None:
    """A writer whose session got a dictionary from another process meanwhile uses
    that one and writes none of its own."""
    root = tmp_path / "root"
    store = journal.open(root)
    try:
        texts = write_events(store, "s", 10)
        sess = store.open_sessions.get("s")
        assert sess is not None
        # Enough samples here; hold the training while another process trains and commits.
        for n in range(150):
            # reaches inside: feeds the sampler directly, to hold the training
            sess._sample(json.dumps({"n": n, "m": text(random.Random(n))}).encode())
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(root), "s", str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert out.stdout.strip() == "dict", out.stderr
        # reaches inside: runs the background job now; it catches up, finds the other's
        store.session_jobs.train_dictionary("s")
        rng = random.Random(11)  # what the child appended (`write_events`, seed 11)
        texts += [chat_event(rng, n).msg["message"] for n in range(200)]
        texts += write_events(store, "s", 20, seed=3)
        dicts = dictionary_records(store, "s")
        assert len(dicts) == 1
        ours = [r for r in log_records(store, "s") if r[1] == EVENT][-20:]
        assert all(r[2] & FLAG_DICT for r in ours)  # compressed with the other's dictionary
        assert messages(store, "s") == texts
    finally:
        store.close()
    with journal.open(root) as cold:
        assert messages(cold, "s") == texts


CONCURRENT_WRITER = r"""
import sys, random
sys.path.insert(0, sys.argv[3])
import journal
from test_dictionary import chat_event
store = journal.open(sys.argv[1])
tag = sys.argv[2]
rng = random.Random(tag)
for n in range(400):
    ev = chat_event(rng, n)
    ev.msg["message"] = f"{tag}:{n}:" + ev.msg["message"]
    store.append_event("s", n, ev)
store.spares.wait()
store.close()
"""


def test_processes_appending_at_once_end_with_one_dictionary(tmp_path: Path) -> None:
    """Three processes append to one session at the same time; each samples and trains
    on its own. Exactly one DICT record is written, and every event of every writer
    reads back, in each writer's order."""
    root = tmp_path / "root"
    with journal.open(root) as store:
        store.save(checkpoint("s", 0, []))
    here = str(Path(__file__).parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WRITER, str(root), tag, here],
            stderr=subprocess.PIPE,
        )
        for tag in ("a", "b", "c")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    with journal.open(root) as store:
        assert len(dictionary_records(store, "s")) == 1
        got = messages(store, "s")
        assert len(got) == 1200
        for tag in ("a", "b", "c"):
            mine = [m for m in got if m.startswith(f"{tag}:")]
            assert [int(m.split(":")[1]) for m in mine] == list(range(400))
        compressed = [r for r in log_records(store, "s") if r[2] & FLAG_DICT]
        assert len(compressed) > 300  # the writers used the one dictionary
    assert data_findings(root) == []


def test_readers_in_threads_share_one_dictionary(tmp_path: Path) -> None:
    import threading

    root = tmp_path / "root"
    store, texts = trained_store(root, after=300)
    store.close()
    with journal.open(root, read_cache_bytes=0) as cold:
        errors: list[BaseException] = []

        def read() -> None:
            try:
                for _ in range(3):
                    assert messages(cold, "s") == texts
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


# ---------------------------------------------------------------- crashes

KILLED_WRITER = r"""
import os, sys, random
sys.path.insert(0, sys.argv[3])
import journal
from test_dictionary import chat_event
store = journal.open(sys.argv[1])
sid, ack = sys.argv[2], os.open(sys.argv[4], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
from journal import EventPageRequest
from helpers import checkpoint
if store.load(sid) is None:
    store.save(checkpoint(sid, 0, []))
n = store.event_page(sid, EventPageRequest(limit=1)).latest_sequence
rng = random.Random(n)
while True:
    got = store.append_event(sid, n, chat_event(random.Random(n), n))
    n = got.sequence
    os.write(ack, f"{n}\n".encode())
"""


def expected_message(n: int) -> str:
    """The message `KILLED_WRITER` appends as event number `n` (sequence n)."""
    return chat_event(random.Random(n - 1), n - 1).msg["message"]


def _acknowledged(ack: Path) -> int:
    """The newest sequence in the ack file (0: none yet); only whole lines count."""
    data = ack.read_bytes() if ack.exists() else b""
    lines = data[: data.rfind(b"\n") + 1].split()
    return int(lines[-1]) if lines else 0


def _log_flags(root: Path, sid: str) -> list[tuple[int, int]]:
    """(type, flags) of every committed record, read from the session's log as it is
    now (while a writer appends)."""
    directory = session_path(str(root), sid)
    return [(rec.rtype, rec.flags) for commit in replay(directory) for rec in commit]


def _has_dictionary(root: Path, sid: str) -> bool:
    return any(rtype == DICT for rtype, _ in _log_flags(root, sid))


def _dictionary_compressed(root: Path, sid: str) -> int:
    return sum(1 for _, flags in _log_flags(root, sid) if flags & FLAG_DICT)


def _wait_until(
    ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, every: float = 0.005
) -> None:
    """Poll `ready` every `every` seconds until it holds; fail if the writer exits or
    it takes 120 s."""
    deadline = time.monotonic() + 120
    while not ready():
        assert proc.poll() is None, f"the writer exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within 120 s"
        time.sleep(every)


@pytest.mark.skipif(os.name != "posix", reason="needs SIGKILL")
def test_kill9_around_the_dictionary_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """Writers killed with SIGKILL while they sample, train, write the DICT record and
    compress with it: every acknowledged event survives, exactly as written.

    A writer samples about its first 130 events (~250 bytes each), trains in the
    background while it appends, commits the DICT record, then compresses. Kills
    come after a random number of acknowledged events (1 to 400), so they land in
    any of those phases; the fourth writer lives until the DICT record is in the
    log and is killed 0 to 50 events later; the last, once the log holds well over
    100 dictionary-compressed records. Where kills land depends on the writers'
    progress, not on the machine's speed."""
    root = tmp_path / "root"
    journal.open(root).close()
    ack = tmp_path / "ack"
    rng = random.Random(int(os.environ.get("JOURNAL_CRASH_SEED", "77")))
    here = str(Path(__file__).parent)
    acked = 0
    kills = 8
    for k in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(root), "s", here, str(ack)],
            stderr=subprocess.PIPE,
        )
        try:
            start, more = acked, rng.randint(1, 400)
            if k == 3:
                _wait_until(lambda: _has_dictionary(root, "s"), proc, "a DICT record", 0.05)
                start, more = _acknowledged(ack), rng.randint(0, 50)
            target = start + more
            _wait_until(lambda t=target: _acknowledged(ack) >= t, proc, f"{more} more acks")
            if k == kills - 1:
                _wait_until(
                    lambda: _dictionary_compressed(root, "s") >= 120,
                    proc,
                    "120 dictionary-compressed records",
                    0.1,  # (each look reads the whole log)
                )
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()
        acked = max(acked, _acknowledged(ack))
        print(f"kill {k}: {more} more acks, {acked} in all")
        with journal.open(root) as store:
            got = messages(store, "s")
            assert len(got) >= acked, f"kill {k}: {len(got)} events, {acked} acknowledged"
            assert got == [expected_message(n) for n in range(1, len(got) + 1)]
        assert data_findings(root) == []
    with journal.open(root) as store:
        assert len(dictionary_records(store, "s")) == 1
        after = [r for r in log_records(store, "s") if r[2] & FLAG_DICT]
        assert len(after) > 100, "the kills should land among dictionary-compressed appends"


# ------------------------------------------------- the tools on such a log


def test_compact_export_import_and_repair_keep_it_readable(tmp_path: Path) -> None:
    from journal.inspect import accept_loss, compact_session, export_sessions, import_bundle

    root = tmp_path / "root"
    rng = random.Random(4)
    store = journal.open(root, segment_bytes=16 << 10)  # several sealed segments
    context: list[Any] = []
    for seq in range(120):
        context = [*context, {"role": "assistant", "content": text(rng)}]
        store.save_with_events(checkpoint("s", seq, context), [{"t": text(rng, 10)}], None, [])
        if seq == 20:
            store.spares.wait()  # the dictionary, early on
    # On a loaded machine the training can finish after the loop: wait for it, and
    # one more save writes its record.
    store.spares.wait()
    context = [*context, {"role": "assistant", "content": text(rng)}]
    store.save_with_events(checkpoint("s", 120, context), [{"t": text(rng, 10)}], None, [])
    sdir = store.session_dir("s")
    assert dictionary_records(store, "s")
    store.close()
    # compaction rewrites sealed segments (stubs and holes): what stays, reads
    report = compact_session(sdir, "s", keep=5)
    assert report.compacted and report.segments_rewritten >= 1
    with journal.open(root) as after:
        assert after.load("s").context == context
        assert after.checkpoint_at("s", 118).context == context[:119]
    assert data_findings(root) == []
    # a bundle of it installs in another store
    bundle = str(tmp_path / "s.bundle")
    export_sessions(str(root), ["s"], bundle)
    other = tmp_path / "other"
    journal.open(other).close()
    import_bundle(str(other), bundle)
    with journal.open(other) as copied:
        assert copied.load("s").context == context
    # damage before the dictionary record in a one-segment log: repair cuts the log
    # there, which takes the dictionary away, and later writes do without it
    root2 = tmp_path / "root2"
    store2, _ = trained_store(root2)
    dict_pos = dictionary_records(store2, "s")[0][0]
    seg = segment_path(store2, "s")
    events = [r for r in log_records(store2, "s") if r[1] == EVENT and r[0] < dict_pos]
    sdir2 = store2.session_dir("s")
    store2.close()
    off, length, _, _ = _frame_at(seg, events[-5][0])
    flip_byte(str(seg), off + HEADER_SIZE + length // 2)
    fixed = accept_loss(sdir2, "s")
    assert fixed.payload is not None and fixed.payload.events_kept == len(events) - 5
    with journal.open(root2, dictionary=True) as again:
        assert dictionary_records(again, "s") == []
        kept = messages(again, "s")
        assert len(kept) == len(events) - 5
        more = write_events(again, "s", 30, seed=8)
        # the lost events' numbers are never handed out again
        assert messages(again, "s", dense=False) == kept + more
        newest = again.event_page("s", EventPageRequest(limit=1)).events[0].sequence
        assert newest == fixed.payload.events_through + 30
    assert data_findings(root2) == []
