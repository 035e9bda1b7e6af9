"""Sizes of every workload: the full run and `--quick`."""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB
BATCH = 1000
"""Events per `save_with_events` when building long histories (one commit each)."""
REOPEN_EVERY = 2000
"""Sessions written per journal store object when building many sessions (open files)."""


@dataclass(frozen=True)
class Config:
    quick: bool
    reps: int
    floor_ops: int
    append_durable: int  # events per repetition, one writer
    append_os: int
    steps_deltas: int  # deltas of one open model step before the `steps` appends
    steps_appends: int
    thread_durable: int  # events per thread per repetition
    thread_os: int
    save_sessions: int  # sessions saved round-robin per repetition
    save_rounds: int  # timed saves per session per repetition
    new_sessions: int  # first saves of new sessions per repetition
    page_histories: tuple[int, int]
    page_calls: int  # calls per sample of a read (fewer when one call is slow)
    sample_seconds: float  # aim for this much time per sample of a read
    long_saves: int  # saves in the long session (open, transcript)
    bytes_events: int
    bytes_saves: int
    memory_histories: tuple[int, int]  # (large, small)
    scan_seconds: float  # cap on one SQLite scan (its deep pages are O(depth)); journal: 10x
    catalog_sizes: tuple[int, ...]  # stores of many small sessions (list, recent, cold, ls)
    fork_parent_events: int
    process_reps: int  # fresh processes per figure (cold open, import, journal ls, RSS)
    state_ops: int  # save_state + load_state pairs per repetition
    disk_sessions: int  # sessions of `disk_turns` turns for the du comparison
    disk_turns: int
    bulk_sessions: int  # sessions created by the bulk workload per repetition
    bulk_reps: int
    blob_saves: int  # saves per repetition of the opaque 50 KiB state


FULL = Config(
    quick=False,
    reps=5,
    floor_ops=400,
    append_durable=400,
    append_os=2_000,
    steps_deltas=20_000,
    steps_appends=300,
    thread_durable=100,
    thread_os=500,
    save_sessions=4,
    save_rounds=10,
    new_sessions=20,
    page_histories=(1_000, 100_000),
    page_calls=200,
    sample_seconds=0.3,
    long_saves=2_000,
    bytes_events=10_000,
    bytes_saves=100,
    memory_histories=(1_000_000, 100_000),
    scan_seconds=15,
    catalog_sizes=(1_000, 2_000, 10_000),
    fork_parent_events=100_000,
    process_reps=7,
    state_ops=300,
    disk_sessions=1_000,
    disk_turns=10,
    bulk_sessions=10_000,
    bulk_reps=2,
    blob_saves=40,
)
QUICK = Config(
    quick=True,
    reps=3,
    floor_ops=200,
    append_durable=150,
    append_os=500,
    steps_deltas=5_000,
    steps_appends=100,
    thread_durable=30,
    thread_os=100,
    save_sessions=2,
    save_rounds=10,
    new_sessions=10,
    page_histories=(1_000, 100_000),
    page_calls=100,
    sample_seconds=0.1,
    long_saves=500,
    bytes_events=2_000,
    bytes_saves=40,
    memory_histories=(100_000, 10_000),
    scan_seconds=3,
    catalog_sizes=(1_000, 2_000),
    fork_parent_events=100_000,
    process_reps=5,
    state_ops=100,
    disk_sessions=1_000,
    disk_turns=10,
    bulk_sessions=2_000,
    bulk_reps=1,
    blob_saves=20,
)

LATER = ("sessions", "transcript", "recent", "fork", "delete")
LATER_METHODS = {
    "sessions": ("list_sessions_page",),
    "transcript": ("transcript_page", "execution_page"),
    "recent": ("recent_executions",),
    "fork": ("fork",),
    "delete": ("fork", "delete_sessions"),
}

LATER = ("sessions", "transcript", "recent", "fork", "delete")
LATER_METHODS = {
    "sessions": ("list_sessions_page",),
    "transcript": ("transcript_page", "execution_page"),
    "recent": ("recent_executions",),
    "fork": ("fork",),
    "delete": ("fork", "delete_sessions"),
}
