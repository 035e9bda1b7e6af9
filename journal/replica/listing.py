"""The sessions a bucket holds, newest first, without reading their chains.

Every session's head object (`heads/<dir>`) is rewritten by its writer after it
ships (about once a second at most), so the listing of `heads/` (one LIST request
per 1,000 sessions, each entry with its LastModified) orders the sessions by when
they were last shipped; only the heads of the page shown are read (one GET each).
A cursor is the (LastModified in ms, directory name) of the last row shown.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import InvalidInputError
from ..layout import replica_heads_prefix
from .chunk import Head, decode_head
from .objects import ObjectStore


@dataclass
class BucketPage:
    """One page of the bucket's sessions."""

    heads: list[Head]
    next_cursor: str | None  # pass as `before` for the next page


def _cursor(modified_ms: int, name: str) -> str:
    return f"{modified_ms}:{name}"


def _parse_cursor(text: str) -> tuple[int, str]:
    ms, sep, name = text.partition(":")
    if not sep or not ms.isdigit() or not name:
        raise InvalidInputError(f"{text!r} is not a bucket listing cursor")
    return int(ms), name


def list_bucket_sessions(
    objects: ObjectStore,
    prefix: str,
    *,
    limit: int = 50,
    before: str | None = None,
    include_deleted: bool = False,
) -> BucketPage:
    """The bucket's sessions, most recently shipped first, `limit` at a time."""
    heads_prefix = replica_heads_prefix(prefix)
    rows = sorted(
        (
            (info.last_modified_ms, info.key[len(heads_prefix) :], info.key)
            for info in objects.list(heads_prefix)
        ),
        reverse=True,
    )
    if before is not None:
        at = _parse_cursor(before)
        rows = [r for r in rows if (r[0], r[1]) < at]
    out: list[Head] = []
    last: tuple[int, str] | None = None
    with ThreadPoolExecutor(max_workers=8) as pool:
        while rows and len(out) < limit:
            batch, rows = rows[: limit - len(out)], rows[limit - len(out) :]

            def read(row: tuple[int, str, str]) -> Head | None:
                got = objects.get(row[2])
                return decode_head(got[0], row[2]) if got is not None else None

            for row, head in zip(batch, pool.map(read, batch), strict=True):
                last = (row[0], row[1])
                if head is not None and (include_deleted or not head.deleted):
                    out.append(head)
    more = bool(rows) and last is not None
    return BucketPage(out, _cursor(*last) if more and last is not None else None)
