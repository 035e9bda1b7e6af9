"""Pure checks of the values a caller hands to the store. No I/O, no state.

Two kinds of failure, both raised before anything is written:

- `InvalidInputError`: a malformed value. NaN or infinity, a value JSON cannot hold,
  a blank id, a negative timestamp, an integer out of range, a size over a limit,
  a limit that is not positive.
- `ContractViolationError`: a well-formed value that breaks a `CheckpointStore` rule.
  An unsupported checkpoint version, pending work without an active execution, an
  execution record for a busy checkpoint, an unclean fork.

Messages follow mobius 0.16.27 (`validate_checkpoint`, `validate_execution_record`,
`validate_identifier`) where it has one, so the same mistake reads the same in both.

Integer ranges: mobius stores `u64` sequences in SQLite INTEGER columns, so sequences,
epochs and limits must be below 2**63 ("exceeds i64"). Other `u64` counters may use the
full u64 range; `i64` values the full i64 range.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any, NoReturn

import msgspec

from journal.errors import ContractViolationError, InvalidInputError
from journal.types import (
    SUPPORTED_CHECKPOINT_VERSIONS,
    Checkpoint,
    Event,
    ExecutionRecord,
    ExecutionStats,
    QueuedMessage,
    SessionContext,
    TokenUsage,
)

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1

MAX_ID_BYTES = 4 * 1024
"""Session ids, owner ids, submission ids, turn ids: at most 4 KiB of UTF-8."""

MAX_QUEUED_MESSAGES = 1024
MAX_QUEUED_OWNER_BYTES = 256
MAX_QUEUED_MESSAGE_BYTES = 2 * 1024 * 1024
"""A queued message serialized as JSON: at most 2 MiB."""

MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays in one value (serde_json's default limit)."""

EXECUTION_OUTCOMES = frozenset({"completed", "aborted", "failed"})

# Rust's `char::is_whitespace` (Unicode White_Space). Python's `str.isspace` differs:
# it also counts U+001C..U+001F, which mobius does not treat as blank.
_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


# --- JSON values -------------------------------------------------------------------------


def check_json_value(value: object, where: str) -> None:
    """Raise `InvalidInputError` unless `value` is plain JSON.

    JSON here is: dict with str keys, list, str (valid UTF-8, so no lone surrogates),
    int within i64/u64, finite float, bool, None, nested at most `MAX_JSON_DEPTH`
    deep. Tuples, sets, bytes, Structs and other objects are rejected, because they
    would not come back equal from the store. The message names the path, e.g.
    `checkpoint.context[3].x: NaN is not a JSON value`.
    """
    _walk_json(value, where, allow_structs=False)


def _walk_json(value: object, where: str, *, allow_structs: bool) -> None:
    if _plain_json(value, allow_structs):
        return
    _walk_json_slowly(value, where, allow_structs=allow_structs)


def _plain_json(value: object, allow_structs: bool) -> bool:
    """The fast check: True when `value` is certainly valid JSON (the common case).

    It walks level by level without building paths (most of the cost of the
    precise walk), accepting only exact built-in types. False means "look
    closer": the precise walk then either raises with the path or accepts (a
    subclass of str or dict, say).
    """
    level: list[object] = [value]
    depth = 0
    while level:
        below: list[object] = []
        for item in level:
            kind = type(item)
            if kind is str:
                if not item.isascii():  # type: ignore[attr-defined]
                    try:
                        item.encode("utf-8")  # type: ignore[attr-defined]
                    except UnicodeEncodeError:
                        return False
            elif kind is int:
                if not I64_MIN <= item <= U64_MAX:  # type: ignore[operator]
                    return False
            elif kind is dict:
                if depth >= MAX_JSON_DEPTH:
                    return False
                # All keys in two C calls: join fails unless every key is a str,
                # and UTF-8 (no lone surrogate) holds for them all or the join fails it.
                try:
                    keys = "".join(item)  # type: ignore[arg-type]
                except TypeError:
                    return False
                if not keys.isascii():
                    try:
                        keys.encode("utf-8")
                    except UnicodeEncodeError:
                        return False
                below.extend(item.values())  # type: ignore[attr-defined]
            elif kind is list:
                if depth >= MAX_JSON_DEPTH:
                    return False
                below.extend(item)  # type: ignore[arg-type]
            elif kind is float:
                if item != item or item in (math.inf, -math.inf):
                    return False
            elif item is None or kind is bool:
                continue
            elif allow_structs and isinstance(item, msgspec.Struct):
                if depth >= MAX_JSON_DEPTH:
                    return False
                below.extend(msgspec.structs.astuple(item))
            else:
                return False
        level = below
        depth += 1
    return True


def _walk_json_slowly(value: object, where: str, *, allow_structs: bool) -> None:
    # Iterative, so deep values cannot exhaust the Python stack; `depth` bounds cycles.
    stack: list[tuple[object, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, str):
            _check_utf8(item, path)
        elif isinstance(item, int):
            if not I64_MIN <= item <= U64_MAX:
                _invalid(f"{path}: integer {item} is outside the i64/u64 range")
        elif isinstance(item, float):
            if math.isnan(item):
                _invalid(f"{path}: NaN is not a JSON value")
            if math.isinf(item):
                _invalid(f"{path}: {'-' if item < 0 else ''}Infinity is not a JSON value")
        elif isinstance(item, dict):
            _check_depth(depth, path)
            children: list[tuple[object, str, int]] = []
            for key, child in item.items():
                if not isinstance(key, str):
                    _invalid(f"{path}: key {key!r} is not a string")
                _check_utf8(key, f"{path} key")
                children.append((child, _child_path(path, key), depth + 1))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            _check_depth(depth, path)
            stack.extend(
                (child, f"{path}[{index}]", depth + 1)
                for index, child in reversed(list(enumerate(item)))
            )
        elif allow_structs and isinstance(item, msgspec.Struct):
            _check_depth(depth, path)
            stack.extend(
                (getattr(item, name), f"{path}.{name}", depth + 1)
                for name in reversed(item.__struct_fields__)
            )
        else:
            _invalid(f"{path}: {type(item).__name__} is not a JSON value")


def _child_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _check_depth(depth: int, path: str) -> None:
    if depth >= MAX_JSON_DEPTH:
        _invalid(f"{path}: nesting is deeper than {MAX_JSON_DEPTH} levels")


def _check_utf8(text: str, path: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        _invalid(f"{path}: string is not valid UTF-8 (lone surrogate)")


# --- identifiers, integers, limits -------------------------------------------------------


def validate_session_id(session_id: object, what: str = "session id") -> str:
    """Return `session_id` if it is a usable session id, else raise `InvalidInputError`.

    A session id is a non-blank str of at most 4 KiB of UTF-8. Any other character is
    allowed (NUL, '/', '..', non-ASCII): the store maps ids to safe file names.
    """
    # Every call checks an id: an ASCII str (its UTF-8 length is its length, it has
    # no surrogates) is answered without the general checks' function calls.
    if (
        type(session_id) is str
        and session_id.isascii()
        and len(session_id) <= MAX_ID_BYTES
        and session_id.strip(_WHITESPACE)
    ):
        return session_id
    return _validate_identifier(session_id, what, MAX_ID_BYTES)


def validate_owner_id(owner_id: object, what: str = "session owner ID") -> str:
    """Return `owner_id` if it is non-blank and at most 4 KiB, else raise `InvalidInputError`."""
    if (  # the common case without the general checks' calls, as in validate_session_id
        type(owner_id) is str
        and owner_id.isascii()
        and len(owner_id) <= MAX_ID_BYTES
        and owner_id.strip(_WHITESPACE)
    ):
        return owner_id
    return _validate_identifier(owner_id, what, MAX_ID_BYTES)


def _validate_identifier(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        _invalid(f"{what} must be a string, not {type(value).__name__}")
    if _is_blank(value):
        _invalid(f"{what} cannot be empty")
    _check_utf8(value, what)
    size = _utf8_len(value)
    if size > limit:
        _invalid(f"{what} exceeds size limit ({size} > {limit} bytes)")
    return value


def validate_sequence(value: object, what: str) -> int:
    """Return `value` if it is an int in 0..2**63-1 (u64 stored as SQLite INTEGER)."""
    if type(value) is int and 0 <= value <= I64_MAX:
        return value
    return _check_int(value, what, 0, I64_MAX, "exceeds i64")


def validate_timestamp(recorded_at_ms: object) -> None:
    """Check an event's `recorded_at_ms`: an int, not negative, within i64."""
    if type(recorded_at_ms) is int and 0 <= recorded_at_ms <= I64_MAX:
        return
    _check_int(
        recorded_at_ms,
        "event journal timestamp",
        0,
        I64_MAX,
        "exceeds i64",
        negative="event journal timestamp cannot be negative",
    )


def validate_limit(limit: object, what: str) -> None:
    """Check a page size: a positive int (not bool) with `limit + 1` within i64.

    `what` names the page, e.g. "event journal page" gives
    "event journal page limit must be positive".
    """
    if not isinstance(limit, int) or isinstance(limit, bool):
        _invalid(f"{what} limit must be an integer, not {type(limit).__name__}")
    if limit <= 0:
        _invalid(f"{what} limit must be positive")
    if limit >= I64_MAX:
        _invalid(f"{what} limit exceeds i64")


def _check_int(
    value: object,
    what: str,
    low: int,
    high: int,
    too_high: str,
    *,
    negative: str | None = None,
) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        _invalid(f"{what} must be an integer, not {type(value).__name__}")
    if value < low:
        _invalid(negative or (f"{what} cannot be negative" if low == 0 else f"{what} {too_high}"))
    if value > high:
        _invalid(f"{what} {too_high}")
    return value


_INT_ONLY = frozenset({int})


def _ints_within(values: tuple[Any, ...], low: int, high: int) -> bool:
    """Whether every value is an exact int (no bool) in low..high, in a few C calls
    (the common case; otherwise the field-by-field checks name the culprit)."""
    return not values or (
        set(map(type, values)) <= _INT_ONLY and low <= min(values) and max(values) <= high
    )


def _u64(value: object, what: str) -> int:
    return _check_int(value, what, 0, U64_MAX, "exceeds u64")


def _i64(value: object, what: str) -> int:
    return _check_int(value, what, I64_MIN, I64_MAX, "is outside the i64 range")


# --- checkpoint --------------------------------------------------------------------------


def validate_checkpoint(cp: Checkpoint, *, context_start: int = 0) -> None:
    """Check a checkpoint before it is saved (or after it is loaded).

    The rules of mobius's `validate_checkpoint` (0.16.27), plus the value checks
    that SQLite and serde do for mobius: ids, integer ranges, plain JSON everywhere.
    `context_start` skips the JSON check of `context[:context_start]`, for a store
    that has already checked that prefix.
    """
    if not isinstance(cp, Checkpoint):
        _invalid(f"checkpoint must be a Checkpoint, not {type(cp).__name__}")
    version = cp.version
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or version not in SUPPORTED_CHECKPOINT_VERSIONS
    ):
        _contract(f"unsupported checkpoint version {version!r}")
    validate_session_id(cp.session_id, "checkpoint session id")
    _check_session_context(cp.session_context)
    _check_field_types(cp)
    validate_sequence(cp.sequence, "checkpoint sequence")
    validate_sequence(cp.context_epoch, "checkpoint context epoch")
    validate_sequence(cp.compaction_count, "checkpoint compaction count")
    _check_usage(cp.total_usage, "checkpoint.total_usage")
    if cp.last_usage is not None:
        _check_usage(cp.last_usage, "checkpoint.last_usage")
    _check_stats(cp.execution_stats, "checkpoint.execution_stats")
    _check_loose_json(cp, context_start)
    _check_active_work(cp)
    _check_pending_messages(cp.pending_messages)


_SESSION_LABELS = (
    "tenant_id",
    "user_id",
    "user_name",
    "workspace_id",
    "workspace_label",
    "origin_label",
)


_STR_OR_NONE = frozenset({str, type(None)})
_session_labels = operator.attrgetter(*_SESSION_LABELS)


def _check_session_context(context: object) -> None:
    if type(context) is SessionContext and set(map(type, _session_labels(context))) <= _STR_OR_NONE:
        validate_owner_id(context.owner_id)
        return
    if not isinstance(context, SessionContext):
        _invalid(f"checkpoint.session_context must be a SessionContext, not {_tname(context)}")
    validate_owner_id(context.owner_id)
    for name in _SESSION_LABELS:
        label = getattr(context, name)
        if label is not None and not isinstance(label, str):
            _invalid(f"checkpoint.session_context.{name} must be a string or null")


_CHECKPOINT_FIELD_TYPES: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("metadata", dict),
    ("catalog_visible", bool),
    ("first_user_message", (str, type(None))),
    ("model_route", (str, type(None))),
    ("context_model_route", (str, type(None))),
    ("context", list),
    ("delivered_once", dict),
    ("total_usage", TokenUsage),
    ("last_usage", (TokenUsage, type(None))),
    ("pending_messages", list),
    ("execution_stats", ExecutionStats),
    ("pending_tools", list),
)


_checkpoint_fields = operator.attrgetter(*(name for name, _ in _CHECKPOINT_FIELD_TYPES))
_CHECKPOINT_FIELD_EXPECTED = tuple(expected for _, expected in _CHECKPOINT_FIELD_TYPES)


def _check_field_types(cp: Checkpoint) -> None:
    # msgspec checks types when decoding, not when a Struct is built in Python.
    # All in one C-level pass first; field by field (naming the culprit) if one fails.
    if not all(map(isinstance, _checkpoint_fields(cp), _CHECKPOINT_FIELD_EXPECTED)):
        for name, expected in _CHECKPOINT_FIELD_TYPES:
            value = getattr(cp, name)
            if not isinstance(value, expected):
                _invalid(f"checkpoint.{name} has the wrong type {_tname(value)}")
    for key, receipts in cp.delivered_once.items():
        if not isinstance(receipts, list) or not all(isinstance(r, str) for r in receipts):
            _invalid(f"checkpoint.delivered_once[{key!r}] must be a list of strings")


def _check_usage(usage: TokenUsage, where: str) -> None:
    if type(usage) is TokenUsage and _ints_within(_astuple(usage), I64_MIN, I64_MAX):
        return
    for name in usage.__struct_fields__:
        _i64(getattr(usage, name), f"{where}.{name}")


_astuple = msgspec.structs.astuple
_STATS_USAGE = ExecutionStats.__struct_fields__.index("usage")


def _check_stats(stats: ExecutionStats, where: str) -> None:
    if type(stats) is ExecutionStats:
        fields = _astuple(stats)
        usage = fields[_STATS_USAGE]
        if (
            type(usage) is TokenUsage
            and _ints_within(fields[:_STATS_USAGE] + fields[_STATS_USAGE + 1 :], 0, U64_MAX)
            and _ints_within(_astuple(usage), I64_MIN, I64_MAX)
        ):
            return
    for name in stats.__struct_fields__:
        if name != "usage":
            _u64(getattr(stats, name), f"{where}.{name}")
    if not isinstance(stats.usage, TokenUsage):
        _invalid(f"{where}.usage has the wrong type {_tname(stats.usage)}")
    _check_usage(stats.usage, f"{where}.usage")


def _check_loose_json(cp: Checkpoint, context_start: int) -> None:
    # Plain JSON everywhere but in the typed fields (`_TYPED_FIELDS`: Structs of
    # the checkpoint's own types, checked by their own validators and walked here
    # for their strings), Structs allowed only there. A Struct inside a loose-JSON
    # field (metadata, pending_tools, a queued message's payload, ...) would come
    # back as a dict. The common case in two fast walks; anything they do not
    # accept is checked precisely below, naming the path.
    fields = msgspec.structs.astuple(cp)
    typed = [fields[i] for i in _TYPED_INDEXES]
    loose = [fields[i] for i in _LOOSE_INDEXES]
    messages = [_astuple(m) if type(m) is QueuedMessage else m for m in fields[_MESSAGES_INDEX]]
    if (
        _plain_json(typed, True)
        and _plain_json([loose, messages], False)
        and _plain_json(cp.context[max(context_start, 0) :], False)
    ):
        return
    for name in cp.__struct_fields__:
        value = getattr(cp, name)
        if name == "context":
            for index in range(max(context_start, 0), len(cp.context)):
                check_json_value(cp.context[index], f"checkpoint.context[{index}]")
        elif name == "pending_messages":
            for index, message in enumerate(value):
                where = f"checkpoint.pending_messages[{index}]"
                if not isinstance(message, QueuedMessage):
                    continue  # refused as such by _check_pending_messages
                for field in message.__struct_fields__:
                    check_json_value(getattr(message, field), f"{where}.{field}")
        elif name in _TYPED_FIELDS:
            _walk_json(value, f"checkpoint.{name}", allow_structs=True)
        else:
            check_json_value(value, f"checkpoint.{name}")


# Fields of a Checkpoint whose values are Structs of its own types (the rest,
# but the context and the queued messages, are loose JSON or plain scalars).
_TYPED_FIELDS = frozenset({"session_context", "total_usage", "last_usage", "execution_stats"})
_TYPED_INDEXES = [i for i, name in enumerate(Checkpoint.__struct_fields__) if name in _TYPED_FIELDS]
_MESSAGES_INDEX = Checkpoint.__struct_fields__.index("pending_messages")
_LOOSE_INDEXES = [
    i
    for i, name in enumerate(Checkpoint.__struct_fields__)
    if name not in _TYPED_FIELDS and name not in ("context", "pending_messages")
]


_CONTEXT_INDEX = Checkpoint.__struct_fields__.index("context")


def _check_active_work(cp: Checkpoint) -> None:
    active = cp.active_execution
    has_pending_work = (
        cp.active_model_step is not None
        or bool(cp.pending_tools)
        or cp.pending_approval is not None
    )
    if active is None:
        if has_pending_work:
            _contract("pending model or tool work has no active execution")
        return
    active = _object(active, "checkpoint.active_execution")
    if _is_blank_field(active, "submission_id") or _is_blank_field(active, "turn_id"):
        _invalid("active execution identifiers cannot be empty")
    _check_utf8_size(active["submission_id"], "active execution submission id")
    _check_utf8_size(active["turn_id"], "active execution turn id")
    started_at_ms = _i64(active.get("started_at_ms"), "active execution start time")
    if started_at_ms < 0:
        _invalid("active execution start time cannot be negative")
    tool_calls = _u64(active.get("tool_calls", 0), "active execution tool count")
    failed = _u64(active.get("failed_tool_calls", 0), "active execution failed-tool count")
    _u64(active.get("model_calls", 0), "active execution model-call count")
    if failed > tool_calls:
        _contract("active execution failed-tool count exceeds tool count")
    if _phase_type(active.get("phase")) == "completion" and has_pending_work:
        _contract("turn completion conflicts with pending model or tool work")

    step = cp.active_model_step
    if step is not None:
        step = _object(step, "checkpoint.active_model_step")
        if _is_blank_field(step, "model_step_id"):
            _invalid("active model-step identifier cannot be empty")
        step_started = _i64(step.get("started_at_ms"), "active model step start time")
        if step_started < started_at_ms:
            _contract("active model step predates its execution")


def _phase_type(phase: object) -> object:
    # mobius tags ExecutionPhase internally: {"type": "model"} / {"type": "completion", ...}.
    return phase.get("type") if isinstance(phase, dict) else phase


def _check_pending_messages(messages: list[QueuedMessage]) -> None:
    if len(messages) > MAX_QUEUED_MESSAGES:
        _invalid(
            f"queued messages exceed the durable item limit "
            f"({len(messages)} > {MAX_QUEUED_MESSAGES})"
        )
    seen: set[tuple[str, str]] = set()
    for index, message in enumerate(messages):
        where = f"checkpoint.pending_messages[{index}]"
        if not isinstance(message, QueuedMessage):
            _invalid(f"{where} must be a QueuedMessage, not {_tname(message)}")
        owner, message_id = message.owner, message.id
        if not _valid_text(owner, MAX_QUEUED_OWNER_BYTES):
            _invalid(f"queued message owner is invalid ({where}.owner)")
        if not _valid_text(message_id, MAX_ID_BYTES):
            _invalid(f"queued message ID is invalid ({where}.id)")
        boundary = message.boundary
        steer = isinstance(boundary, dict) and boundary.get("type") == "steer"
        if steer and not _valid_text(boundary.get("turn_id"), MAX_ID_BYTES):
            _invalid(f"queued message turn ID is invalid ({where}.boundary.turn_id)")
        size = len(msgspec.json.encode(message))
        if size > MAX_QUEUED_MESSAGE_BYTES:
            _invalid(
                f"queued message is invalid: {where} is {size} bytes of JSON, "
                f"over the {MAX_QUEUED_MESSAGE_BYTES}-byte limit"
            )
        if (owner, message_id) in seen:
            _contract(f"duplicate queued message `{owner}/{message_id}`")
        seen.add((owner, message_id))


# --- execution records, events, forks ----------------------------------------------------


def validate_execution(record: ExecutionRecord, checkpoint: Checkpoint) -> None:
    """Check a finished-turn record saved together with `checkpoint`.

    The checkpoint must be idle (no active execution) and of the same session; then
    the record itself must pass `validate_execution_record`.
    """
    if not isinstance(record, ExecutionRecord):
        _invalid(f"execution record must be an ExecutionRecord, not {_tname(record)}")
    if checkpoint.active_execution is not None:
        _contract("a terminal execution requires an idle checkpoint")
    if record.session_id != checkpoint.session_id:
        _contract("execution record does not match its checkpoint")
    validate_execution_record(record)


def validate_execution_record(record: ExecutionRecord) -> None:
    """Check one execution record on its own (mobius runs this on save and on read)."""
    if not isinstance(record, ExecutionRecord):
        _invalid(f"execution record must be an ExecutionRecord, not {_tname(record)}")
    ids = (record.session_id, record.submission_id, record.turn_id)
    if not all(isinstance(v, str) for v in ids) or any(_is_blank(v) for v in ids):
        _invalid("execution record identifiers cannot be empty")
    validate_session_id(record.session_id, "execution record session id")
    _check_utf8_size(record.submission_id, "execution record submission id")
    _check_utf8_size(record.turn_id, "execution record turn id")
    started = _i64(record.started_at_ms, "execution record start time")
    finished = _i64(record.finished_at_ms, "execution record finish time")
    if started < 0:
        _invalid("execution record has invalid timestamps (start time is negative)")
    if finished < started:
        _contract("execution record has invalid timestamps (finished before it started)")
    elapsed = _u64(record.elapsed_ms, "execution record elapsed time")
    if elapsed != finished - started:
        _contract("execution elapsed time does not match its timestamps")
    if record.outcome not in EXECUTION_OUTCOMES:
        _invalid(
            f"execution record outcome {record.outcome!r} is not one of "
            f"'completed', 'aborted', 'failed'"
        )
    tool_calls = _u64(record.tool_calls, "execution record tool count")
    failed = _u64(record.failed_tool_calls, "execution record failed-tool count")
    _u64(record.model_calls, "execution record model-call count")
    if failed > tool_calls:
        _contract("execution failed-tool count exceeds tool count")
    if not isinstance(record.usage, TokenUsage):
        _invalid(f"execution record usage has the wrong type {_tname(record.usage)}")
    _check_usage(record.usage, "execution.usage")
    check_json_value(record.author, "execution.author")


def validate_event(event: Event) -> None:
    """Check an event: `msg` is an object with a string "type", and everything is JSON."""
    # Every append checks one: the common shape answered in one expression, the
    # checks below name what is wrong otherwise.
    if type(event) is Event:
        sid, msg = event.submission_id, event.msg
        if (
            (sid is None or (type(sid) is str and sid.isascii()))
            and type(msg) is dict
            and type(kind := msg.get("type")) is str
            and kind
            and _plain_json(msg, False)
        ):
            return
    if not isinstance(event, Event):
        _invalid(f"event must be an Event, not {_tname(event)}")
    if event.submission_id is not None:
        if not isinstance(event.submission_id, str):
            _invalid("event submission id must be a string or null")
        _check_utf8(event.submission_id, "event.submission_id")
    msg = event.msg
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str) or not msg["type"]:
        _invalid('event msg must be an object with a non-empty string "type"')
    check_json_value(msg, "event.msg")


def validate_fork_child(parent_session_id: str, checkpoint: Checkpoint) -> None:
    """Check the fork preconditions that need no I/O.

    The child must differ from the parent and be clean: sequence 0, no active
    execution, no pending approval, no pending messages. The child must also pass
    `validate_checkpoint`; this function does not run it.
    """
    validate_session_id(parent_session_id, "fork parent session id")
    if parent_session_id == checkpoint.session_id:
        _contract("a session cannot fork itself")
    if (
        checkpoint.sequence != 0
        or checkpoint.active_execution is not None
        or checkpoint.pending_approval is not None
        or checkpoint.pending_messages
    ):
        _contract("a fork must begin at a clean sequence-zero checkpoint")


# --- helpers -----------------------------------------------------------------------------


def _invalid(message: str) -> NoReturn:
    raise InvalidInputError(message)


def _contract(message: str) -> NoReturn:
    raise ContractViolationError(message)


def _tname(value: object) -> str:
    return type(value).__name__


def _is_blank(text: str) -> bool:
    return not text.strip(_WHITESPACE)


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _valid_text(value: object, limit: int) -> bool:
    return isinstance(value, str) and not _is_blank(value) and _utf8_len(value) <= limit


def _is_blank_field(obj: Mapping[str, Any], key: str) -> bool:
    value = obj.get(key)
    return not isinstance(value, str) or _is_blank(value)


def _check_utf8_size(text: str, what: str) -> None:
    _check_utf8(text, what)
    size = _utf8_len(text)
    if size > MAX_ID_BYTES:
        _invalid(f"{what} exceeds size limit ({size} > {MAX_ID_BYTES} bytes)")


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _invalid(f"{where} must be a JSON object, not {_tname(value)}")
    return value


__all__ = [
    "EXECUTION_OUTCOMES",
    "I64_MAX",
    "I64_MIN",
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_QUEUED_MESSAGES",
    "MAX_QUEUED_MESSAGE_BYTES",
    "MAX_QUEUED_OWNER_BYTES",
    "U64_MAX",
    "check_json_value",
    "validate_checkpoint",
    "validate_event",
    "validate_execution",
    "validate_execution_record",
    "validate_fork_child",
    "validate_limit",
    "validate_owner_id",
    "validate_sequence",
    "validate_session_id",
    "validate_timestamp",
]
