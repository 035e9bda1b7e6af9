"""The suffix replacement of the SDK's compaction session, as one conditional record.

`OpenAIResponsesCompactionSession` asks its session for a snapshot of the newest
items (`_get_compaction_snapshot`), has the Responses API compact a suffix of
them, and then replaces that suffix with the compacted output through the
snapshot's `replace_suffix`. Here the replacement is ONE journal event, `{"type":
REPLACE, "drop": [...], "items": [...]}`, appended as a compare-and-append
(`expected_latest`): the dropped items go as if popped and the output is added,
in one record that is its own commit, so after a crash at any byte the session
holds the old items or the new ones, never a mix; and it is appended only if
the session's newest items are still the ones the snapshot read (as
`SQLiteSession` checks its rows inside its transaction).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from journal import ContractViolationError, Event, InvalidInputError, NotFoundError, Store

from .records import REPLACE, Key, decode_all, now_ms
from .scan import LogScanner
from .sync import CacheSync

Prune = Callable[[Any], bool]
"""The SDK's `prune_prefix`: whether an old item may go (e.g. an expired envelope)."""


@dataclass(frozen=True)
class Window:
    """The newest `limit` live items (oldest first) with their positions, as of event
    `latest`; `complete`: no older live item exists."""

    limit: int
    keys: list[Key]
    items: list[Any]
    complete: bool
    latest: int


class SuffixReplacer:
    """Snapshots and suffix replacements of one `JournalSession` (called under its lock)."""

    def __init__(self, store: Store, session_id: str, sync: CacheSync, scanner: LogScanner):
        self.store = store
        self.session_id = session_id
        self.sync = sync
        self.scanner = scanner

    def window(self, limit: int) -> Window:
        """The newest `limit` live items, from the cache when it holds them, else the log."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidInputError(f"snapshot limit must be a positive integer, not {limit!r}")
        cs = self.sync
        c = cs.sync(limit + 1)
        if c.ident is None:  # no such session: nothing to replace
            return Window(limit, [], [], True, c.latest)
        cs.extend(c, limit + 1)
        if len(c.keys) > limit or c.complete:
            n = min(limit, len(c.keys))
            keys = c.keys[len(c.keys) - n :]
            items = decode_all(c.vals[len(c.vals) - n :])
            return Window(limit, keys, items, len(c.keys) <= limit, c.latest)
        # Beyond the cache budget: read the log (one more item tells if it is complete).
        got: list[tuple[Key, Any]] = []
        for key, item, _ in self.scanner.items(c.chain, None, set(), want=limit + 1):
            got.append((key, item))
            if len(got) > limit:
                break
        complete = len(got) <= limit
        got = got[:limit]
        got.reverse()
        return Window(limit, [k for k, _ in got], [i for _, i in got], complete, c.latest)

    def replace_suffix(
        self, win: Window, start: int, output: list[Any], prune: Prune | None
    ) -> bool:
        """Replace the items of `win` from `start` on with `output`, in one record.

        False, with nothing written, when there is no such suffix or the session's
        newest items are no longer those of `win`. `prune`: the SDK's
        `prune_prefix`; when `win` holds every live item, the oldest items it
        accepts, in a row, go too (a longer history keeps its prefix).
        """
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise InvalidInputError(f"suffix start must be a non-negative integer, not {start!r}")
        batch = list(output)
        for i, item in enumerate(batch):
            if not isinstance(item, dict):
                raise InvalidInputError(
                    f"session {self.session_id!r}: compacted item {i} is a"
                    f" {type(item).__name__}, not a JSON object"
                )
        expected = win.keys[start:]
        if not expected:
            return False
        seen = win.latest
        for _ in range(8):
            # Newest first: each drop names the newest item left, as a pop would.
            drop = expected[::-1]
            if prune is not None and win.complete:
                for key, item in zip(win.keys[:start], win.items[:start], strict=True):
                    if not prune(item):
                        break
                    drop.append(key)
            msg = {"type": REPLACE, "drop": [list(k) for k in drop], "items": batch}
            try:
                jev = self.store.append_event(
                    self.session_id, now_ms(), Event(msg=msg), expected_latest=seen
                )
            except NotFoundError:  # deleted meanwhile
                self.sync.current = None
                return False
            except ContractViolationError:
                # Something was written since the snapshot: replace only if the
                # newest items are still the snapshot's (e.g. an event of another kind).
                self.sync.current = None  # rebuilt from the log by `window`
                again = self.window(win.limit)
                if again.latest == seen:
                    raise  # not a stale view: a real contract error
                if again.keys != win.keys or again.complete != win.complete:
                    return False
                win, seen = again, again.latest
                continue
            c = self.sync.current
            fits = c is not None and c.ident is not None and jev.sequence == c.latest + 1
            if c is not None and fits and not self.sync.apply(c, jev.sequence, msg):
                self.sync.current = None
            return True
        return False  # the session keeps changing under us: leave it as it is
