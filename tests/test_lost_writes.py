"""Power loss, simulated at the fsync seam (`journal.fsio.ops`, see faults.py).

A scripted workload runs against a store while `PowerLossOps` records what is
durable. Before every file operation of every call (and after every call) we
write "crash images": copies of the store as a power loss at that instant could
leave it, with only synced content and synced directory entries, optionally
plus an in-order, possibly torn prefix of the unsynced writes. Each image is
then opened with the real file operations and must show exactly the state after
the last call that returned, or (for an image taken while a call was running)
the state after that call: never a mix, never less. Then it must take new writes.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zstandard
from faults import PowerLossOps, commit_dictionary, recording
from helpers import checkpoint, execution, observe, warning

import journal

SEED = int(os.environ.get("JOURNAL_LOSTWRITES_SEED", "20240601"))
SESSIONS = ["alpha", "beta", "gamma", "delta"]  # gamma: a fork of alpha; delta: of gamma
STATE_KEYS = [("alpha", "cursor"), ("shared", "config")]
SEGMENT_BYTES = 4096  # small, so segments roll during the workload


@dataclass
class Image:
    path: str
    step: int  # calls that had returned when the image was taken
    in_flight: bool  # a call was running (its commit may or may not be there)
    where: str


def workload() -> list[tuple[str, Any]]:
    """A deterministic script of (description, call(store)) steps."""
    steps: list[tuple[str, Any]] = []
    ctx: dict[str, list[Any]] = {sid: [] for sid in ("alpha", "beta")}
    epoch = dict.fromkeys(("alpha", "beta"), 0)
    rnd = random.Random(7)

    def save(sid: str, seq: int, *, events: int, big: bool = False, new_epoch: bool = False):
        if new_epoch:
            epoch[sid] += 1
            ctx[sid] = []
        item: dict[str, Any] = {"role": "user", "n": seq, "text": f"{sid} turn {seq}"}
        if big:  # spans pages; compressible so zstd framing is exercised too
            item["blob"] = "".join(rnd.choice("abcd") for _ in range(3000))
        ctx[sid] = [*ctx[sid], item]
        cp = checkpoint(sid, seq, list(ctx[sid]), epoch=epoch[sid])
        delta = [{"t": f"{sid}/{seq}/{k}"} for k in range(seq % 3)]
        exe = execution(sid, seq) if seq % 2 == 1 else None
        evs = [warning(f"{sid} save {seq} event {k}") for k in range(events)]

        def call(store: journal.Store) -> None:
            store.save_with_events(cp, delta, exe, evs)

        steps.append((f"save {sid} {seq}", call))

    def append(sid: str, n: int) -> None:
        def call(store: journal.Store) -> None:
            store.append_event(sid, 1_700_000_000_000 + n, warning(f"{sid} append {n}").event)

        steps.append((f"append {sid} {n}", call))

    def flush() -> None:
        def call(store: journal.Store) -> None:
            store.flush()  # index files and snapshots: written without fsync, then renamed

        steps.append(("flush caches", call))

    def state(scope: str, key: str, n: int) -> None:
        def call(store: journal.Store) -> None:
            store.save_state(scope, key, {"n": n, "pad": "x" * (n * 37 % 200)})

        steps.append((f"state {scope}/{key} {n}", call))

    def fork(parent: str, seq: int, child: str) -> None:
        def call(store: journal.Store) -> None:
            store.fork_at(parent, seq, child)

        steps.append((f"fork {parent}@{seq} -> {child}", call))

    def dictionary(sid: str) -> None:
        # A zstd dictionary for payloads like this workload's, committed as the
        # session's DICT record (what the background training does, here in the
        # recorded order): the records after it are compressed with it.
        rng = random.Random(3)
        samples = [
            msgspec.msgpack.encode(
                [{"role": "user", "n": k, "text": f"{sid} turn {k}"}, f"{sid} save {k} event"]
                + [rng.choice(["session", "owner", "context", "epoch"]) for _ in range(8)]
            )
            for k in range(200)
        ]
        data = zstandard.train_dictionary(2048, samples).as_bytes()

        def call(store: journal.Store) -> None:
            commit_dictionary(store, sid, data)

        steps.append((f"dictionary {sid}", call))

    def delete(sid: str) -> None:
        def call(store: journal.Store) -> None:
            assert store.delete_sessions([sid])

        steps.append((f"delete {sid} and its forks", call))

    save("alpha", 0, events=2)
    append("alpha", 0)
    state("alpha", "cursor", 0)
    save("beta", 0, events=0)
    for i in range(1, 11):
        save("alpha", i, events=i % 4, big=i in (3, 8), new_epoch=i == 6)
        append("beta", i)
        if i % 3 == 0:
            state("shared", "config", i)
            state("alpha", "cursor", i)
        if i % 4 == 0:
            save("beta", i, events=1)
        if i == 2:
            fork("alpha", 1, "gamma")
        if i == 4:
            dictionary("alpha")
        if i == 5:
            fork("gamma", 0, "delta")
        if i == 8:
            delete("gamma")
        if i % 3 == 1:
            flush()
        append("alpha", i)
    return steps


def observe_all(store: journal.Store) -> dict[str, Any]:
    """The sessions, the state keys, and the catalog's listing (derived, but never wrong)."""
    seen = observe(store, SESSIONS, STATE_KEYS)
    page = store.list_sessions_page(journal.SessionPageRequest(limit=100))
    seen["listing"] = sorted(
        (s.session_id, s.sequence, s.parent_session_id, s.parent_sequence) for s in page.sessions
    )
    return seen


def run_recorded(
    root: str, images_dir: str, seed: int, durability: str = "fsync"
) -> tuple[list[Any], list[Image]]:
    """Run the workload, taking crash images; return the state after each step and the images."""
    rng = random.Random(seed)
    images: list[Image] = []
    states: list[Any] = []
    step = 0
    recorder: PowerLossOps

    def snap(where: str, in_flight: bool, op: str) -> None:
        variants: list[dict[str, Any]] = []
        if durability == "os":  # between calls only, where most is unsynced
            if in_flight:
                return
            variants += [{"rng": random.Random(rng.random())} for _ in range(2)]
        elif op.startswith("sync") or not in_flight:
            variants.append({})  # durable content only: changes at syncs
        variants.append({"rng": random.Random(rng.random())})
        variants.append({"rng": random.Random(rng.random()), "live_dirs": True})
        for v in variants:
            path = os.path.join(images_dir, f"img{len(images):05d}")
            recorder.crash_image(path, **v)
            images.append(Image(path, step, in_flight, f"{where} {v.keys() or 'durable'}"))

    steps = workload()
    with recording(root) as recorder:
        store = journal.open(root, durability=durability, segment_bytes=SEGMENT_BYTES)
        states.append(observe_all(store))
        snap("after open", False, "")
        for desc, call in steps:
            recorder.hook = lambda op, path, desc=desc: snap(
                f"during {desc!r} before {op} {os.path.relpath(path, root)}", True, op
            )
            call(store)
            recorder.hook = None
            step += 1
            states.append(observe_all(store))
            snap(f"after {desc!r}", False, "")
        store.close()
    return states, images


def continue_writing(path: str, seen: dict[str, Any]) -> None:
    """The recovered store takes new commits, and they survive a reopen."""
    store = journal.open(path, durability="fsync", segment_bytes=SEGMENT_BYTES)
    try:
        alpha = seen["alpha"]
        nxt = 0 if alpha is None else alpha["checkpoint"]["sequence"] + 1
        old_ctx = [] if alpha is None else alpha["checkpoint"]["context"]
        epoch = 0 if alpha is None else alpha["checkpoint"]["context_epoch"]
        cp = checkpoint("alpha", nxt, [*old_ctx, {"after": "crash"}], epoch=epoch)
        store.save_with_events(cp, [{"t": "after"}], None, [warning("after crash")])
        store.append_event("alpha", 1, warning("after crash 2").event)
        store.save_state("alpha", "cursor", {"after": True})
    finally:
        store.close()
    store = journal.open(path, durability="fsync", segment_bytes=SEGMENT_BYTES)
    try:
        now = observe(store, SESSIONS, STATE_KEYS)
    finally:
        store.close()
    a = now["alpha"]
    assert a["checkpoint"]["sequence"] == nxt
    assert a["checkpoint"]["context"][-1] == {"after": "crash"}
    old_events = [] if alpha is None else alpha["events"]
    assert a["events"][: len(old_events)] == old_events
    assert [e["event"]["msg"]["message"] for e in a["events"][len(old_events) :]] == [
        "after crash",
        "after crash 2",
    ]
    assert a["events"][-1]["sequence"] == (old_events[-1]["sequence"] if old_events else 0) + 2
    assert now["beta"] == seen["beta"]
    assert now["state:alpha:cursor"] == {"after": True}


def test_power_loss_at_every_step(tmp_path: Any) -> None:
    print(f"JOURNAL_LOSTWRITES_SEED={SEED}")
    root = str(tmp_path / "store")
    states, images = run_recorded(root, str(tmp_path / "images"), SEED)
    assert len(images) > 200, "the workload should produce many power-loss points"
    for k, img in enumerate(images):
        try:
            store = journal.open(img.path, durability="fsync", segment_bytes=SEGMENT_BYTES)
            try:
                seen = observe_all(store)
            finally:
                store.close()
        except journal.JournalError as exc:
            pytest.fail(f"image {k} ({img.where}, after {img.step} calls) does not open: {exc!r}")
        allowed = [states[img.step]]
        if img.in_flight:
            allowed.append(states[img.step + 1])
        if seen not in allowed:
            want = states[img.step]
            diff = {
                key: (seen.get(key), want.get(key))
                for key in want
                if seen.get(key) != want.get(key)
            }
            pytest.fail(
                f"image {k} ({img.where}, after {img.step} calls) shows a state that no"
                f" acknowledged prefix of the workload had; differences (seen, expected): {diff}"
            )
        if k % 4 == 0:  # (all would be slow; every 4th covers each kind of point)
            continue_writing(img.path, seen)
        shutil.rmtree(img.path)  # keep the disk footprint small


def test_power_loss_in_os_mode(tmp_path: Any) -> None:
    """durability="os" promises nothing for a power loss, but sessions must stay whole.

    Each session shows its state after some earlier call: a suffix of its calls may
    be lost, nothing is partial, and the store opens and takes new writes. A state
    value comes back as some earlier value, never unreadable: in this mode its temp
    file is synced before the rename (docs/durability.md).
    """
    print(f"JOURNAL_LOSTWRITES_SEED={SEED}")
    root = str(tmp_path / "store")
    states, images = run_recorded(root, str(tmp_path / "images"), SEED + 1, "os")
    lost = 0
    for k, img in enumerate(images):
        store = journal.open(img.path, durability="os", segment_bytes=SEGMENT_BYTES)
        try:
            seen = observe(store, SESSIONS)  # no listing: sessions may lose different calls
            for scope, key in STATE_KEYS:
                seen[f"state:{scope}:{key}"] = store.load_state(scope, key)
        finally:
            store.close()
        last = img.step + 1 if img.in_flight else img.step
        for key, value in seen.items():
            earlier = [s[key] for s in states[: last + 1]]
            assert value in earlier, f"image {k} ({img.where}): {key} is no earlier state"
            lost += value != earlier[-1]
        if k % 4 == 0 and len(seen) == len(SESSIONS) + len(STATE_KEYS):
            continue_writing(img.path, seen)
        shutil.rmtree(img.path)
    assert lost > 0, "some unsynced calls should have been lost (else this tests nothing)"
    print(f"os mode: {lost} lost calls")


def test_torn_final_write(tmp_path: Any) -> None:
    """The last commit's bytes reach the disk only partly: every cut point recovers."""
    root = str(tmp_path / "store")
    images: list[tuple[str, int, bool]] = []
    with recording(root) as recorder:
        store = journal.open(root, durability="fsync", segment_bytes=1 << 20)
        ctx: list[Any] = []
        for seq in range(3):
            ctx = [*ctx, {"n": seq, "text": "x" * 50}]
            store.save_with_events(
                checkpoint("s", seq, ctx),
                [{"t": seq}],
                execution("s", seq) if seq else None,
                [warning(f"e{seq}.{k}") for k in range(2)],
            )
        before = observe(store, ["s"])
        cut_points: list[int] = []

        def tear(op: str, path: str) -> None:
            if op != "sync_data" or not path.endswith(".seg"):
                return
            writes = recorder.pending_writes(path)
            last = len(writes) - 1
            data = writes[last][2]
            size = len(data)
            cut_points.append(size)
            # byte prefixes of the commit, from nothing to all but one: every one around
            # the first record header and the end, every 7th byte in between
            for n in [n for n in range(size) if n < 40 or n > size - 40 or n % 7 == 0]:
                dest = os.path.join(str(tmp_path), f"torn{n:05d}")
                recorder.crash_image(dest, tear=(path, last, n))
                # The commit lands in preallocated zeros: a cut that loses only zero
                # bytes (the COMMIT record ends with committed_at_ms, whose low byte
                # is 0 once in 256 runs) leaves the whole commit on disk.
                images.append((dest, n, not data[n:].strip(b"\0")))

        recorder.hook = tear
        ctx = [*ctx, {"n": 3, "text": "y" * 50}]
        store.save_with_events(
            checkpoint("s", 3, ctx),
            [{"t": 3}, {"t": 3.5}],
            execution("s", 3),
            [warning(f"e3.{k}") for k in range(3)],
        )
        recorder.hook = None
        after = observe(store, ["s"])
        store.close()
    assert len(cut_points) == 1 and cut_points[0] > 100
    assert len(images) > 80
    for dest, n, whole in images:
        want = after if whole else before
        store = journal.open(dest, durability="fsync")
        try:
            assert observe(store, ["s"]) == want, f"cut after {n} bytes"
            # the torn tail is cut away on the next write, which then succeeds
            store.save_with_events(
                checkpoint("s", 4, [*ctx[: 4 if whole else 3], {"n": 4}]),
                [{"t": 4}],
                None,
                [warning("e4")],
            )
            seen = observe(store, ["s"])
        finally:
            store.close()
        assert seen["s"]["checkpoint"]["sequence"] == 4
        assert seen["s"]["events"][:-1] == want["s"]["events"]
        assert seen["s"]["events"][-1]["sequence"] == want["s"]["events"][-1]["sequence"] + 1
        if not whole:
            assert 3 not in seen["s"]["history"] or seen["s"]["history"][3] is None
        shutil.rmtree(dest)
    assert after != before


# --- a cut that loses only zero bytes ---------------------------------------------------
# The commit lands in preallocated zeros, and its last record (the COMMIT record) ends
# with `committed_at_ms`. When that timestamp's low byte is 0 (once in 256 runs), the
# cut after all but the last byte leaves exactly the bytes of the complete commit: it
# recovers as written. The clock is chosen here, so both cases are taken every run: the
# cut before a zero last byte keeps the commit, the cut before any other drops it.


def _clock_ending_in(low: int) -> float:
    """A time whose milliseconds end in the byte `low` (the byte before it not 0)."""
    ms = (int(time.time() * 1000) >> 8) + 1
    if ms & 0xFF == 0:
        ms += 1  # the next-to-last byte of the timestamp stays nonzero
    return ((ms << 8) | low) / 1000 + 0.0004  # (+0.4 ms: int(t * 1000) gives ms back)


def _images_of_last_cuts(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, low: int
) -> tuple[dict[str, Any], dict[str, Any], list[Any], bytes, list[tuple[str, int]]]:
    """Three saves, then a fourth whose clock ends in `low`, imaged before its sync
    with the write cut after each of its last three bytes."""
    root = str(tmp / "store")
    images: list[tuple[str, int]] = []
    written: list[bytes] = []
    with recording(root) as recorder:
        store = journal.open(root, durability="fsync", segment_bytes=1 << 20)
        ctx: list[Any] = []
        for seq in range(3):
            ctx = [*ctx, {"n": seq, "text": "x" * 50}]
            store.save_with_events(
                checkpoint("s", seq, ctx), [{"t": seq}], None, [warning(f"e{seq}")]
            )
        before = observe(store, ["s"])

        def tear(op: str, path: str) -> None:
            if op != "sync_data" or not path.endswith(".seg"):
                return
            writes = recorder.pending_writes(path)
            data = writes[-1][2]
            written.append(data)
            for n in range(len(data) - 3, len(data)):
                dest = str(tmp / f"torn{n:05d}")
                recorder.crash_image(dest, tear=(path, len(writes) - 1, n))
                images.append((dest, n))

        recorder.hook = tear
        with monkeypatch.context() as m:
            at = _clock_ending_in(low)
            m.setattr(time, "time", lambda: at)
            store.save_with_events(
                checkpoint("s", 3, [*ctx, {"n": 3}]), [{"t": 3}], execution("s", 3), []
            )
        recorder.hook = None
        after = observe(store, ["s"])
        store.close()
    assert len(written) == 1
    return before, after, ctx, written[0], images


@pytest.mark.parametrize("low", [0x00, 0x6F])
def test_cut_that_loses_only_a_zero_byte_keeps_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, low: int
) -> None:
    before, after, ctx, data, images = _images_of_last_cuts(tmp_path, monkeypatch, low)
    assert data[-1] == low and data[-2] != 0, "the commit ends with committed_at_ms"
    assert after != before
    for dest, n in images:
        whole = not data[n:].strip(b"\0")  # the rule test_torn_final_write uses
        assert whole == (n == len(data) - 1 and low == 0)
        store = journal.open(dest, durability="fsync")
        try:
            assert observe(store, ["s"]) == (after if whole else before), f"cut after {n} bytes"
            # and the next commit follows what recovery kept
            kept = [*ctx, {"n": 3}] if whole else ctx
            store.save_with_events(checkpoint("s", len(kept), [*kept, {"n": 9}]), [], None, [])
            loaded = store.load("s")
            assert loaded is not None and loaded.sequence == len(kept)
            assert loaded.context == [*kept, {"n": 9}]
        finally:
            store.close()
        shutil.rmtree(dest)
