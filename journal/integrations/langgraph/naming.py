"""Which journal session holds which LangGraph thread namespace, and finding them.

A thread's root namespace ("") is the session whose id is the thread id (with
an optional prefix); a subgraph namespace is a child session (a fork of the
root) with id `<thread id>::ns::<namespace>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from langchain_core.runnables import RunnableConfig

from journal import InvalidInputError, SessionPageRequest, SessionSummary, Store

NS_SEP = "::ns::"
"""Separates the thread id from the checkpoint namespace in a subgraph's session id."""

ORIGIN_LABEL = "langgraph"
"""`session_context.origin_label` of every session this saver creates."""

Target = tuple[str, str, str]  # (session id, thread id, namespace)


def target(config: RunnableConfig) -> tuple[str, str]:
    """The (thread id, namespace) a config names."""
    conf = config.get("configurable") or {}
    if "thread_id" not in conf or conf["thread_id"] is None:
        raise InvalidInputError('config["configurable"]["thread_id"] is required')
    thread_id = str(conf["thread_id"])
    ns = conf.get("checkpoint_ns") or ""
    if not isinstance(ns, str):
        raise InvalidInputError("checkpoint_ns must be a string")
    return thread_id, ns


def check_prefix(prefix: str) -> None:
    """Refuse a session id prefix that would make session ids ambiguous."""
    if NS_SEP in prefix:
        raise InvalidInputError(f"session_prefix cannot contain {NS_SEP!r}")


def session_id(prefix: str, thread_id: str, checkpoint_ns: str = "") -> str:
    """The journal session id of a thread's namespace."""
    if NS_SEP in thread_id:
        raise InvalidInputError(f"thread id {thread_id!r} contains {NS_SEP!r}")
    root = prefix + thread_id
    return root if not checkpoint_ns else f"{root}{NS_SEP}{checkpoint_ns}"


def parse(prefix: str, sid: str) -> tuple[str, str] | None:
    """The (thread id, namespace) of a session id (None: not one of these)."""
    if not sid.startswith(prefix):
        return None
    rest = sid[len(prefix) :]
    thread_id, sep, ns = rest.partition(NS_SEP)
    if not thread_id:
        return None
    return thread_id, (ns if sep else "")


# ----------------------------------------------------------------- lookups
def thread_sessions(store: Store, prefix: str, thread_id: str | None) -> list[Target]:
    """Every LangGraph session of the store (of one thread, if given)."""
    out: list[Target] = []

    def take(summaries: Iterable[SessionSummary]) -> None:
        for s in summaries:
            if s.session_context.origin_label != ORIGIN_LABEL:
                continue
            parsed = parse(prefix, s.session_id)
            if parsed is not None:
                out.append((s.session_id, parsed[0], parsed[1]))

    if thread_id is not None:
        root = session_id(prefix, thread_id)
        summary = store.session_summary(root)
        take([summary] if summary is not None else [])
        return out + namespaces(store, prefix, thread_id)
    cursor = None
    while True:
        page = store.list_sessions_page(SessionPageRequest(cursor=cursor, limit=500))
        take(page.sessions)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    out.sort(key=lambda t: (t[1], t[2]))
    return out


def namespaces(store: Store, prefix: str, thread_id: str) -> list[Target]:
    """A thread's subgraph namespaces, by namespace.

    They are the sessions forked from the thread's root (what the catalog keeps
    per parent, not a walk of every session in the store) named as namespaces
    of this thread: another fork of the root (made with `Store.fork`, say) is
    not part of the thread.
    """
    out: list[Target] = []
    for s in store.child_sessions(session_id(prefix, thread_id)):
        if s.session_context.origin_label != ORIGIN_LABEL:
            continue
        parsed = parse(prefix, s.session_id)
        if parsed is not None and parsed[0] == thread_id and parsed[1]:
            out.append((s.session_id, thread_id, parsed[1]))
    out.sort(key=lambda t: t[2])
    return out


def thread_targets(store: Store, prefix: str, thread_id: str) -> Iterator[Target]:
    """`list`'s sessions of a thread: its root (whose index tells whether it
    exists), then its namespaces, looked up in the catalog only if a `list`
    gets past the root (one with a `limit` often does not)."""
    yield session_id(prefix, thread_id), thread_id, ""
    yield from namespaces(store, prefix, thread_id)
