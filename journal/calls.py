"""What every public call of a store shares: its errors, its pins, its arguments.

`guarded` wraps each public method of `Store` and `SessionReader`: it translates a
stray dependency or OS exception into a `JournalError`, and releases the sessions
the call pinned (`pin`) once its outermost call returns, so the open-session cache
never closes a session that a call is still using. The other helpers check and
convert a call's arguments before anything is touched.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import msgspec

from . import validate
from .errors import CorruptionError, InvalidInputError, JournalError, StorageError
from .types import (
    Checkpoint,
    EventPageRequest,
    ExecutionPageRequest,
    ExecutionRecord,
    TimestampedEvent,
    TranscriptPageRequest,
)

if TYPE_CHECKING:
    from .session import Session

F = TypeVar("F", bound=Callable[..., Any])
Release = Callable[[list["Session"]], None]


class _CallState(threading.local):
    """Per thread: how deep in public calls, and the sessions the outermost pinned
    (each with what releases it)."""

    def __init__(self) -> None:
        self.depth = 0
        self.pinned: list[tuple[Release, Session]] = []


_calls = _CallState()


def pin(sess: Session, release: Release) -> None:
    """Mark a session in use until this thread's outermost public call returns, which
    then hands it to `release` (nothing outside a call: the caller keeps its own
    count then)."""
    calls = _calls
    if calls.depth > 0:
        sess.users += 1
        calls.pinned.append((release, sess))


def _release_pins(pinned: list[tuple[Release, Session]]) -> None:
    """Hand each owner (nearly always one) the sessions pinned for it."""
    by_owner: dict[Release, list[Session]] = {}
    for release, sess in pinned:
        by_owner.setdefault(release, []).append(sess)
    for release, sessions in by_owner.items():
        release(sessions)


def guarded(fn: F) -> F:
    """Translate any stray dependency or OS exception into a JournalError, and
    release the sessions the call pinned once the outermost call returns."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls = _calls
        depth = calls.depth
        calls.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        except JournalError:
            raise
        except (msgspec.ValidationError, msgspec.EncodeError, TypeError, UnicodeError) as exc:
            # UnicodeError: a str with a lone surrogate, which UTF-8 cannot hold.
            raise InvalidInputError(f"{fn.__name__}: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise CorruptionError(f"{fn.__name__}: stored data does not decode: {exc}") from exc
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise StorageError(f"{fn.__name__}: {exc.strerror or exc}{where}") from exc
        finally:
            calls.depth = depth
            if depth == 0 and calls.pinned:
                pinned, calls.pinned = calls.pinned, []
                if len(pinned) == 1:  # the usual case, without a call more
                    release, sess = pinned[0]
                    release([sess])
                else:
                    _release_pins(pinned)

    return cast(F, wrapper)


def coerce(value: Any, typ: type[Any], what: str) -> Any:
    """`value` as a `typ` (converted from builtins if it is not one)."""
    if isinstance(value, typ):
        return value
    try:
        return msgspec.convert(value, typ)
    except (msgspec.ValidationError, UnicodeError) as exc:
        raise InvalidInputError(f"{what} is not a valid {typ.__name__}: {exc!r}") from exc


PageRequest = TypeVar("PageRequest", EventPageRequest, TranscriptPageRequest, ExecutionPageRequest)


def page_request(session_id: str, request: Any, typ: type[PageRequest], what: str) -> PageRequest:
    """Check a newest-first page request: the session id, the page size, the cursor."""
    validate.validate_session_id(session_id)
    req: PageRequest = coerce(request, typ, "request")
    size = req.max_batches if isinstance(req, TranscriptPageRequest) else req.limit
    validate.validate_limit(size, what)
    if req.before_sequence is not None:
        validate.validate_sequence(req.before_sequence, "before_sequence")
    return req


def as_list(value: Any, what: str) -> list[Any]:
    """A list or tuple argument as a list (a str, bytes or dict is not a sequence of items)."""
    if not isinstance(value, (list, tuple)):
        raise InvalidInputError(f"{what} must be a list, not {type(value).__name__}")
    return list(value)


def save_parts(
    cp: Checkpoint,
    checked_from: int,
    transcript_delta: Sequence[Any],
    execution: ExecutionRecord | None,
    events: Sequence[TimestampedEvent],
) -> tuple[list[Any], ExecutionRecord | None, list[TimestampedEvent]]:
    """A save's arguments beside the checkpoint, checked and converted (the
    checkpoint's context from `checked_from` on is checked already)."""
    items = as_list(transcript_delta, "transcript_delta")
    # The delta is usually the new context tail itself (the same objects), which
    # was just checked: check it again only if it holds anything else.
    checked = {id(item) for item in cp.context[checked_from:]}
    if any(id(item) not in checked for item in items):
        validate.check_json_value(items, "transcript_delta")
    rec: ExecutionRecord | None = None
    if execution is not None:
        rec = coerce(execution, ExecutionRecord, "execution")
        validate.validate_execution(rec, cp)
    evs = [coerce(e, TimestampedEvent, "event") for e in as_list(events, "events")]
    for e in evs:
        validate.validate_timestamp(e.recorded_at_ms)
        validate.validate_event(e.event)
    return items, rec, evs
