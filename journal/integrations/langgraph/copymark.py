"""What makes `copy_thread` atomic: a copy is absent until its last commit.

A thread spans several journal sessions (its root and one per namespace), and
the journal commits one session at a time, so the copy cannot appear in one
commit. Instead the target's root says, in the place a reader looks first,
whether the copy is finished:

- the target root starts with a placeholder checkpoint whose
  `metadata.langgraph` names the source (`copy_of`);
- every event the copy writes into the root carries `"copy": 1`;
- the copy's last commit, after every namespace is copied, is a
  `langgraph_delete` event on the root that hides nothing, without the flag
  (the seal), appended on condition that nothing else was appended since.

So the root's newest event is flagged, or the root has no event and its head
is such a placeholder, exactly while the copy is unfinished (or was cut short
by a crash): the saver then treats the whole thread as absent. Every later
event of the thread (the seal, then the thread's own puts) is unflagged. So a
rewrite of a copied root's log (a compaction) must keep the seal, though it
hides nothing, or another unflagged event after the flagged ones.
"""

from __future__ import annotations

from journal import EventPage, EventPageRequest, NotFoundError

from .naming import NS_SEP
from .reads import SessionReads

COPY_FLAG = "copy"  # in the message of each event a copy writes into the target root
COPY_OF = "copy_of"  # in `metadata.langgraph` of the target root's placeholder
SEAL_REASON = "copy_thread"  # the `reason` of the seal (a delete that hides nothing)


def root_of(sid: str, ns: str) -> str:
    """The root session id of the thread whose namespace `ns` is session `sid`."""
    return sid[: -(len(NS_SEP) + len(ns))] if ns else sid


def unfinished(reads: SessionReads, root: str, newest: EventPage | None = None) -> bool:
    """Whether `root` is the root of a copy not finished (False: a thread, or none).

    `newest`: the root's newest-event page if the caller has read it.
    """
    if newest is None:
        try:
            newest = reads.event_page(root, EventPageRequest(limit=1))
        except NotFoundError:
            return False
    if newest.events:
        return newest.events[0].event.msg.get(COPY_FLAG) == 1
    if newest.latest_sequence > 0:
        return False  # events that the log no longer keeps: not a fresh copy's root
    head = reads.load(root)
    if head is None:
        return False
    lg = head.metadata.get("langgraph")
    return isinstance(lg, dict) and COPY_OF in lg
