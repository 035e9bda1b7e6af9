"""`journal.validate`: one test per rule, each with a passing and a failing case."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import helpers
import msgspec
import pytest

# reaches inside: these are tests of the validation rules themselves, one per rule
from journal import (
    Checkpoint,
    ContractViolationError,
    Event,
    ExecutionRecord,
    ExecutionStats,
    InvalidInputError,
    JournalError,
    QueuedMessage,
    SessionContext,
    TokenUsage,
    check_json_value,
    validate_session_id,
)
from journal.validate import (
    MAX_JSON_DEPTH,
    validate_checkpoint,
    validate_event,
    validate_execution,
    validate_execution_record,
    validate_fork_child,
    validate_limit,
    validate_owner_id,
    validate_sequence,
    validate_timestamp,
)

replace = msgspec.structs.replace


@contextmanager
def fails(kind: type[JournalError], message: str) -> Iterator[None]:
    """Expect exactly `kind` (not a sibling class) with a message starting with `message`."""
    with pytest.raises(kind, match="^" + re.escape(message)) as info:
        yield
    assert type(info.value) is kind


# A turn with some calls made, one tool call failed and tokens used.
active_execution = functools.partial(
    helpers.active_execution,
    model_calls=1,
    tool_calls=2,
    failed_tool_calls=1,
    usage={"input_tokens": 5, "output_tokens": 1, "total_tokens": 6},
    next_model_step=1,
)


def model_step(**changes: Any) -> dict[str, Any]:
    return {"model_step_id": "step-1", "step_index": 0, "started_at_ms": 1_000, **changes}


def queued(owner: str = "messages", id: str = "sub-2", **changes: Any) -> QueuedMessage:
    fields: dict[str, Any] = {
        "boundary": {"type": "queue"},
        "author": {"type": "user"},
        "message": "next",
        "attachments": [],
        "reply": None,
        **changes,
    }
    return QueuedMessage(owner=owner, id=id, **fields)


def idle(**changes: Any) -> Checkpoint:
    cp = Checkpoint.empty("s-1", owner_id="cli")
    cp = replace(
        cp,
        sequence=3,
        context=[{"type": "message", "role": "user", "content": "hi"}, {"n": 1}],
        metadata={"k": [1, 2.5, None, True]},
    )
    return replace(cp, **changes)


def busy(**changes: Any) -> Checkpoint:
    return idle(**{"active_execution": active_execution(), **changes})


def record(**changes: Any) -> ExecutionRecord:
    fields: dict[str, Any] = {
        "session_id": "s-1",
        "submission_id": "sub-1",
        "author": {"type": "user"},
        "turn_id": "turn-1",
        "started_at_ms": 1_000,
        "finished_at_ms": 1_500,
        "elapsed_ms": 500,
        "outcome": "completed",
        "model_calls": 2,
        "tool_calls": 3,
        "failed_tool_calls": 1,
        **changes,
    }
    return ExecutionRecord(**fields)


# --- session ids -------------------------------------------------------------------------


def test_session_id_allows_any_characters() -> None:
    for session_id in ["s-1", "a/b", "..", "nul\x00byte", "ünïcødé 🚀", "\x1c", "x" * 4096]:
        assert validate_session_id(session_id) == session_id


def test_session_id_must_be_a_string() -> None:
    assert validate_session_id("7") == "7"
    with fails(InvalidInputError, "session id must be a string, not int"):
        validate_session_id(7)
    with fails(InvalidInputError, "session id must be a string, not bytes"):
        validate_session_id(b"s-1")


def test_session_id_cannot_be_blank() -> None:
    assert validate_session_id(" x ") == " x "
    for blank in ["", "   ", "\t\n", "\u3000"]:
        with fails(InvalidInputError, "session id cannot be empty"):
            validate_session_id(blank)


def test_session_id_names_what_is_checked() -> None:
    with fails(InvalidInputError, "fork parent session id cannot be empty"):
        validate_session_id("", "fork parent session id")


def test_session_id_is_at_most_4_kib_of_utf8() -> None:
    assert validate_session_id("é" * 2048)  # 4096 bytes
    with fails(InvalidInputError, "session id exceeds size limit (4097 > 4096 bytes)"):
        validate_session_id("é" * 2048 + "a")
    with fails(InvalidInputError, "session id exceeds size limit"):
        validate_session_id("x" * 4097)


def test_session_id_must_be_valid_utf8() -> None:
    assert validate_session_id("\U0001f600")
    with fails(InvalidInputError, "session id: string is not valid UTF-8"):
        validate_session_id("bad\ud800")


def test_owner_id_rules() -> None:
    assert validate_owner_id("gateway") == "gateway"
    with fails(InvalidInputError, "session owner ID cannot be empty"):
        validate_owner_id(" ")
    with fails(InvalidInputError, "session owner ID exceeds size limit"):
        validate_owner_id("o" * 4097)


# --- JSON values -------------------------------------------------------------------------


def test_json_accepts_plain_values() -> None:
    check_json_value(
        {
            "s": "ünï",
            "i": [-(2**63), 2**64 - 1, 0],
            "f": [1.5, -0.0, 1e308],
            "b": [True, False],
            "n": None,
            "nested": {"a": [{"b": []}]},
        },
        "value",
    )


def test_json_rejects_nan_with_path() -> None:
    with fails(InvalidInputError, "checkpoint.context[3].x: NaN is not a JSON value"):
        check_json_value([0, 1, 2, {"x": float("nan")}], "checkpoint.context")


def test_json_rejects_infinity() -> None:
    check_json_value({"x": 1.0e300}, "v")
    with fails(InvalidInputError, "v.x: Infinity is not a JSON value"):
        check_json_value({"x": float("inf")}, "v")
    with fails(InvalidInputError, "v[0]: -Infinity is not a JSON value"):
        check_json_value([float("-inf")], "v")


def test_json_rejects_integers_outside_i64_u64() -> None:
    check_json_value([2**64 - 1, -(2**63)], "v")
    with fails(InvalidInputError, f"v[0]: integer {2**64} is outside the i64/u64 range"):
        check_json_value([2**64], "v")
    with fails(InvalidInputError, "v: integer"):
        check_json_value(-(2**63) - 1, "v")


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (b"bytes", "bytes"),
        ({1, 2}, "set"),
        ((1, 2), "tuple"),
        (object(), "object"),
        (TokenUsage(), "TokenUsage"),
        (1 + 2j, "complex"),
    ],
)
def test_json_rejects_non_json_types(value: object, name: str) -> None:
    with fails(InvalidInputError, f"v.k: {name} is not a JSON value"):
        check_json_value({"k": value}, "v")


def test_json_rejects_non_string_keys() -> None:
    check_json_value({"1": 1}, "v")
    with fails(InvalidInputError, "v.a: key 1 is not a string"):
        check_json_value({"a": {1: "x"}}, "v")


def test_json_rejects_lone_surrogates() -> None:
    check_json_value({"k": "\U0001f600"}, "v")
    with fails(InvalidInputError, "v.k: string is not valid UTF-8"):
        check_json_value({"k": "\udc80"}, "v")
    with fails(InvalidInputError, "v key: string is not valid UTF-8"):
        check_json_value({"\ud800": 1}, "v")


def test_json_path_quotes_odd_keys() -> None:
    with fails(InvalidInputError, "v['a b'][0]: NaN is not a JSON value"):
        check_json_value({"a b": [float("nan")]}, "v")


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_json_nesting_is_bounded() -> None:
    check_json_value(nested(MAX_JSON_DEPTH), "v")
    with pytest.raises(
        InvalidInputError, match=f"\\]: nesting is deeper than {MAX_JSON_DEPTH} levels$"
    ):
        check_json_value(nested(MAX_JSON_DEPTH + 1), "v")


def test_json_rejects_cycles() -> None:
    shared = {"x": 1}
    check_json_value([shared, shared], "v")  # a shared value is fine
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(InvalidInputError, match="nesting is deeper"):
        check_json_value(cycle, "v")


# --- checkpoint --------------------------------------------------------------------------


def test_valid_checkpoints_pass() -> None:
    validate_checkpoint(Checkpoint.empty("s"))
    validate_checkpoint(idle())
    validate_checkpoint(
        busy(
            active_model_step=model_step(),
            pending_tools=[{"call_id": "c1", "name": "shell", "arguments": {"cmd": "ls"}}],
            pending_messages=[queued()],
            last_context_rewrite={"epoch": 1, "reasons": ["compaction"]},
            delivered_once={"skills": ["a"]},
            last_usage=TokenUsage(input_tokens=-1),
        )
    )


def test_checkpoint_version_must_be_supported() -> None:
    validate_checkpoint(idle(version=19))
    validate_checkpoint(idle(version=20))
    for version in (18, 21, 9):
        with fails(ContractViolationError, f"unsupported checkpoint version {version}"):
            validate_checkpoint(idle(version=version))
    with fails(ContractViolationError, "unsupported checkpoint version '20'"):
        validate_checkpoint(idle(version="20"))
    with fails(ContractViolationError, "unsupported checkpoint version [20]"):
        validate_checkpoint(idle(version=[20]))


def test_checkpoint_must_be_a_checkpoint() -> None:
    with fails(InvalidInputError, "checkpoint must be a Checkpoint, not dict"):
        validate_checkpoint({"version": 20})  # type: ignore[arg-type]


def test_checkpoint_session_id_is_validated() -> None:
    validate_checkpoint(idle(session_id="a/../b\x00"))
    with fails(InvalidInputError, "checkpoint session id cannot be empty"):
        validate_checkpoint(idle(session_id=" "))
    with fails(InvalidInputError, "checkpoint session id exceeds size limit"):
        validate_checkpoint(idle(session_id="s" * 5000))


def test_checkpoint_owner_cannot_be_blank() -> None:
    validate_checkpoint(idle(session_context=SessionContext(owner_id="o")))
    with fails(InvalidInputError, "session owner ID cannot be empty"):
        validate_checkpoint(idle(session_context=SessionContext(owner_id="  ")))


def test_checkpoint_owner_is_at_most_4_kib() -> None:
    validate_checkpoint(idle(session_context=SessionContext(owner_id="o" * 4096)))
    with fails(InvalidInputError, "session owner ID exceeds size limit"):
        validate_checkpoint(idle(session_context=SessionContext(owner_id="o" * 4097)))


def test_checkpoint_session_context_labels_are_strings() -> None:
    validate_checkpoint(idle(session_context=SessionContext(owner_id="o", tenant_id="t")))
    with fails(InvalidInputError, "checkpoint.session_context.tenant_id must be a string or null"):
        validate_checkpoint(idle(session_context=SessionContext(owner_id="o", tenant_id=5)))  # type: ignore[arg-type]
    with fails(InvalidInputError, "checkpoint.session_context must be a SessionContext"):
        validate_checkpoint(idle(session_context={"owner_id": "o"}))


@pytest.mark.parametrize(
    ("field", "label"),
    [
        ("sequence", "checkpoint sequence"),
        ("context_epoch", "checkpoint context epoch"),
        ("compaction_count", "checkpoint compaction count"),
    ],
)
def test_checkpoint_counters_are_non_negative_i64(field: str, label: str) -> None:
    validate_checkpoint(idle(**{field: 2**63 - 1}))
    with fails(InvalidInputError, f"{label} cannot be negative"):
        validate_checkpoint(idle(**{field: -1}))
    with fails(InvalidInputError, f"{label} exceeds i64"):
        validate_checkpoint(idle(**{field: 2**63}))
    with fails(InvalidInputError, f"{label} must be an integer, not bool"):
        validate_checkpoint(idle(**{field: True}))
    with fails(InvalidInputError, f"{label} must be an integer, not float"):
        validate_checkpoint(idle(**{field: 1.0}))


def test_checkpoint_token_usage_is_i64() -> None:
    validate_checkpoint(idle(total_usage=TokenUsage(total_tokens=-(2**63))))
    with fails(InvalidInputError, "checkpoint.total_usage.total_tokens is outside the i64 range"):
        validate_checkpoint(idle(total_usage=TokenUsage(total_tokens=2**63)))
    with fails(InvalidInputError, "checkpoint.last_usage.input_tokens is outside the i64 range"):
        validate_checkpoint(idle(last_usage=TokenUsage(input_tokens=-(2**63) - 1)))


def test_checkpoint_execution_stats_are_u64() -> None:
    validate_checkpoint(idle(execution_stats=ExecutionStats(run_count=2**64 - 1)))
    with fails(InvalidInputError, "checkpoint.execution_stats.run_count cannot be negative"):
        validate_checkpoint(idle(execution_stats=ExecutionStats(run_count=-1)))
    with fails(InvalidInputError, "checkpoint.execution_stats.elapsed_ms exceeds u64"):
        validate_checkpoint(idle(execution_stats=ExecutionStats(elapsed_ms=2**64)))
    usage = TokenUsage(output_tokens=2**63)
    with fails(InvalidInputError, "checkpoint.execution_stats.usage.output_tokens is outside"):
        validate_checkpoint(idle(execution_stats=ExecutionStats(usage=usage)))


def test_checkpoint_field_types_are_checked() -> None:
    with fails(InvalidInputError, "checkpoint.metadata has the wrong type list"):
        validate_checkpoint(idle(metadata=[]))
    with fails(InvalidInputError, "checkpoint.context has the wrong type tuple"):
        validate_checkpoint(idle(context=()))
    with fails(InvalidInputError, "checkpoint.first_user_message has the wrong type int"):
        validate_checkpoint(idle(first_user_message=1))
    with fails(InvalidInputError, "checkpoint.catalog_visible has the wrong type int"):
        validate_checkpoint(idle(catalog_visible=1))


def test_checkpoint_delivered_once_holds_string_lists() -> None:
    validate_checkpoint(idle(delivered_once={"guide": ["a", "b"]}))
    with fails(InvalidInputError, "checkpoint.delivered_once['guide'] must be a list of strings"):
        validate_checkpoint(idle(delivered_once={"guide": ["a", 1]}))


def test_checkpoint_metadata_must_be_json() -> None:
    validate_checkpoint(idle(metadata={"score": 0.5}))
    with fails(InvalidInputError, "checkpoint.metadata.score: NaN is not a JSON value"):
        validate_checkpoint(idle(metadata={"score": float("nan")}))
    with fails(InvalidInputError, "checkpoint.metadata.tags: set is not a JSON value"):
        validate_checkpoint(idle(metadata={"tags": {"a"}}))


def test_checkpoint_context_items_must_be_json() -> None:
    cp = idle(context=[{"ok": 1}, {"ok": 2}, {"ok": 3}, {"x": [float("inf")]}])
    with fails(InvalidInputError, "checkpoint.context[3].x[0]: Infinity is not a JSON value"):
        validate_checkpoint(cp)
    validate_checkpoint(idle(context=[{"ok": 1}, {"x": [1e10]}]))


def test_checkpoint_context_start_skips_checked_prefix() -> None:
    cp = idle(context=[{"x": float("nan")}, {"y": 1}])
    validate_checkpoint(cp, context_start=1)
    with fails(InvalidInputError, "checkpoint.context[0].x: NaN"):
        validate_checkpoint(cp, context_start=0)
    with fails(InvalidInputError, "checkpoint.context[1].y: NaN"):
        validate_checkpoint(idle(context=[{"y": 1}, {"y": float("nan")}]), context_start=1)


def test_checkpoint_other_loose_fields_must_be_json() -> None:
    tool = {"call_id": "c", "name": "n", "arguments": {"v": float("nan")}}
    with fails(InvalidInputError, "checkpoint.pending_tools[0].arguments.v: NaN"):
        validate_checkpoint(busy(pending_tools=[tool]))
    with fails(InvalidInputError, "checkpoint.active_execution.usage.x: NaN"):
        validate_checkpoint(busy(active_execution=active_execution(usage={"x": float("nan")})))
    with fails(InvalidInputError, "checkpoint.pending_messages[0].reply: bytes is not"):
        validate_checkpoint(idle(pending_messages=[queued(reply=b"x")]))
    with fails(InvalidInputError, "checkpoint.last_context_rewrite.reasons: set is not"):
        validate_checkpoint(idle(last_context_rewrite={"epoch": 1, "reasons": {"compaction"}}))


def test_active_execution_must_be_an_object() -> None:
    with fails(InvalidInputError, "checkpoint.active_execution must be a JSON object, not list"):
        validate_checkpoint(idle(active_execution=[]))


def test_active_execution_ids_cannot_be_blank() -> None:
    validate_checkpoint(busy())
    for changes in ({"submission_id": " "}, {"turn_id": ""}, {"turn_id": None}):
        with fails(InvalidInputError, "active execution identifiers cannot be empty"):
            validate_checkpoint(busy(active_execution=active_execution(**changes)))
    cp = busy(active_execution={k: v for k, v in active_execution().items() if k != "turn_id"})
    with fails(InvalidInputError, "active execution identifiers cannot be empty"):
        validate_checkpoint(cp)


def test_active_execution_start_cannot_be_negative() -> None:
    validate_checkpoint(busy(active_execution=active_execution(started_at_ms=0)))
    with fails(InvalidInputError, "active execution start time cannot be negative"):
        validate_checkpoint(busy(active_execution=active_execution(started_at_ms=-1)))
    with fails(InvalidInputError, "active execution start time must be an integer"):
        validate_checkpoint(busy(active_execution=active_execution(started_at_ms="1")))


def test_active_execution_failed_tools_within_tool_calls() -> None:
    validate_checkpoint(busy(active_execution=active_execution(tool_calls=2, failed_tool_calls=2)))
    with fails(ContractViolationError, "active execution failed-tool count exceeds tool count"):
        validate_checkpoint(
            busy(active_execution=active_execution(tool_calls=2, failed_tool_calls=3))
        )


def test_active_execution_counters_are_u64() -> None:
    with fails(InvalidInputError, "active execution tool count cannot be negative"):
        validate_checkpoint(busy(active_execution=active_execution(tool_calls=-1)))


@pytest.mark.parametrize(
    "pending",
    [
        {"active_model_step": model_step()},
        {"pending_tools": [{"call_id": "c1", "name": "shell", "arguments": {}}]},
        {"pending_approval": {"submission_id": "sub-1", "request_id": "r1"}},
    ],
)
def test_completion_phase_conflicts_with_pending_work(pending: dict[str, Any]) -> None:
    completion = active_execution(phase={"type": "completion", "last_assistant_message": "ok"})
    validate_checkpoint(busy(active_execution=completion))
    validate_checkpoint(busy(**pending))  # model phase: pending work is fine
    with fails(ContractViolationError, "turn completion conflicts with pending model or tool work"):
        validate_checkpoint(busy(active_execution=completion, **pending))


@pytest.mark.parametrize(
    "pending",
    [
        {"active_model_step": model_step()},
        {"pending_tools": [{"call_id": "c1", "name": "shell", "arguments": {}}]},
        {"pending_approval": {"submission_id": "sub-1", "request_id": "r1"}},
    ],
)
def test_pending_work_needs_active_execution(pending: dict[str, Any]) -> None:
    validate_checkpoint(busy(**pending))
    with fails(ContractViolationError, "pending model or tool work has no active execution"):
        validate_checkpoint(idle(**pending))


def test_active_model_step_id_cannot_be_blank() -> None:
    validate_checkpoint(busy(active_model_step=model_step(model_step_id="s")))
    with fails(InvalidInputError, "active model-step identifier cannot be empty"):
        validate_checkpoint(busy(active_model_step=model_step(model_step_id=" ")))
    with fails(InvalidInputError, "checkpoint.active_model_step must be a JSON object"):
        validate_checkpoint(busy(active_model_step="step-1"))


def test_active_model_step_cannot_predate_execution() -> None:
    validate_checkpoint(busy(active_model_step=model_step(started_at_ms=1_000)))
    with fails(ContractViolationError, "active model step predates its execution"):
        validate_checkpoint(busy(active_model_step=model_step(started_at_ms=999)))


def test_pending_messages_at_most_1024() -> None:
    many = [queued(id=f"sub-{i}") for i in range(1024)]
    validate_checkpoint(idle(pending_messages=many))
    with fails(InvalidInputError, "queued messages exceed the durable item limit (1025 > 1024)"):
        validate_checkpoint(idle(pending_messages=[*many, queued(id="one-more")]))


def test_pending_message_must_be_queued_message() -> None:
    with fails(InvalidInputError, "checkpoint.pending_messages[0] must be a QueuedMessage"):
        validate_checkpoint(idle(pending_messages=[{"owner": "o", "id": "i"}]))


def test_pending_message_owner_is_1_to_256_bytes() -> None:
    validate_checkpoint(idle(pending_messages=[queued(owner="o" * 256)]))
    for owner in ("", " ", "o" * 257):
        with fails(InvalidInputError, "queued message owner is invalid"):
            validate_checkpoint(idle(pending_messages=[queued(owner=owner)]))


def test_pending_message_id_is_1_to_4096_bytes() -> None:
    validate_checkpoint(idle(pending_messages=[queued(id="i" * 4096)]))
    for message_id in ("", "\t", "i" * 4097):
        with fails(InvalidInputError, "queued message ID is invalid"):
            validate_checkpoint(idle(pending_messages=[queued(id=message_id)]))


def test_pending_message_steer_turn_id_is_valid() -> None:
    steer = {"type": "steer", "turn_id": "turn-1"}
    validate_checkpoint(idle(pending_messages=[queued(boundary=steer)]))
    with fails(InvalidInputError, "queued message turn ID is invalid"):
        validate_checkpoint(idle(pending_messages=[queued(boundary={"type": "steer"})]))


def test_pending_message_is_at_most_2_mib() -> None:
    validate_checkpoint(idle(pending_messages=[queued(message="x" * (2 * 1024 * 1024 - 1024))]))
    with fails(InvalidInputError, "queued message is invalid: checkpoint.pending_messages[0]"):
        validate_checkpoint(idle(pending_messages=[queued(message="x" * (2 * 1024 * 1024))]))


def test_pending_messages_are_unique_per_owner_and_id() -> None:
    validate_checkpoint(idle(pending_messages=[queued("a", "sub-2"), queued("b", "sub-2")]))
    with fails(ContractViolationError, "duplicate queued message `a/sub-2`"):
        validate_checkpoint(idle(pending_messages=[queued("a", "sub-2"), queued("a", "sub-2")]))


# --- execution records -------------------------------------------------------------------


def test_valid_execution_passes() -> None:
    validate_execution(record(), idle())
    validate_execution_record(record())


def test_execution_needs_idle_checkpoint() -> None:
    with fails(ContractViolationError, "a terminal execution requires an idle checkpoint"):
        validate_execution(record(), busy())


def test_execution_session_must_match_checkpoint() -> None:
    validate_execution(record(session_id="s-2"), idle(session_id="s-2"))
    with fails(ContractViolationError, "execution record does not match its checkpoint"):
        validate_execution(record(session_id="s-2"), idle())


@pytest.mark.parametrize("field", ["session_id", "submission_id", "turn_id"])
def test_execution_ids_cannot_be_blank(field: str) -> None:
    with fails(InvalidInputError, "execution record identifiers cannot be empty"):
        validate_execution_record(record(**{field: " "}))
    validate_execution_record(record(**{field: "x"}))


def test_execution_start_cannot_be_negative() -> None:
    validate_execution_record(record(started_at_ms=0, finished_at_ms=0, elapsed_ms=0))
    with fails(InvalidInputError, "execution record has invalid timestamps"):
        validate_execution_record(record(started_at_ms=-1, finished_at_ms=0, elapsed_ms=1))


def test_execution_cannot_finish_before_start() -> None:
    with fails(ContractViolationError, "execution record has invalid timestamps"):
        validate_execution_record(record(started_at_ms=1_000, finished_at_ms=999, elapsed_ms=0))


def test_execution_elapsed_equals_finished_minus_started() -> None:
    validate_execution_record(record(started_at_ms=10, finished_at_ms=25, elapsed_ms=15))
    with fails(ContractViolationError, "execution elapsed time does not match its timestamps"):
        validate_execution_record(record(started_at_ms=10, finished_at_ms=25, elapsed_ms=16))


def test_execution_failed_tools_within_tool_calls() -> None:
    validate_execution_record(record(tool_calls=3, failed_tool_calls=3))
    with fails(ContractViolationError, "execution failed-tool count exceeds tool count"):
        validate_execution_record(record(tool_calls=3, failed_tool_calls=4))


def test_execution_outcome_is_one_of_three() -> None:
    for outcome in ("completed", "aborted", "failed"):
        validate_execution_record(record(outcome=outcome))
    with fails(InvalidInputError, "execution record outcome 'cancelled' is not one of"):
        validate_execution_record(record(outcome="cancelled"))


def test_execution_numbers_are_in_range() -> None:
    with fails(InvalidInputError, "execution record tool count cannot be negative"):
        validate_execution_record(record(tool_calls=-1, failed_tool_calls=0))
    with fails(InvalidInputError, "execution record finish time is outside the i64 range"):
        validate_execution_record(record(finished_at_ms=2**63, elapsed_ms=2**63 - 1_000))
    with fails(InvalidInputError, "execution.usage.total_tokens is outside the i64 range"):
        validate_execution_record(record(usage=TokenUsage(total_tokens=2**64)))


def test_execution_author_must_be_json() -> None:
    validate_execution_record(record(author={"type": "source", "ancestry": []}))
    with fails(InvalidInputError, "execution.author.x: NaN is not a JSON value"):
        validate_execution_record(record(author={"x": float("nan")}))


# --- events, timestamps, limits, sequences -----------------------------------------------


def test_timestamp_cannot_be_negative() -> None:
    validate_timestamp(0)
    validate_timestamp(1_760_000_000_000)
    with fails(InvalidInputError, "event journal timestamp cannot be negative"):
        validate_timestamp(-1)


def test_timestamp_is_an_i64_integer() -> None:
    validate_timestamp(2**63 - 1)
    with fails(InvalidInputError, "event journal timestamp exceeds i64"):
        validate_timestamp(2**63)
    with fails(InvalidInputError, "event journal timestamp must be an integer, not float"):
        validate_timestamp(1.5)
    with fails(InvalidInputError, "event journal timestamp must be an integer, not bool"):
        validate_timestamp(True)


def test_event_msg_needs_string_type() -> None:
    validate_event(Event(msg={"type": "turn_started", "turn_id": "t1"}))
    validate_event(Event(submission_id="sub-1", msg={"type": "a_future_kind"}))
    for msg in ({"turn_id": "t1"}, {"type": 1}, {"type": ""}, ["type"]):
        with fails(InvalidInputError, 'event msg must be an object with a non-empty string "type"'):
            validate_event(Event(msg=msg))  # type: ignore[arg-type]


def test_event_payload_must_be_json() -> None:
    with fails(InvalidInputError, "event.msg.info.rate: NaN is not a JSON value"):
        validate_event(Event(msg={"type": "token_count", "info": {"rate": float("nan")}}))
    with fails(InvalidInputError, "event submission id must be a string or null"):
        validate_event(Event(submission_id=5, msg={"type": "x"}))  # type: ignore[arg-type]
    with fails(InvalidInputError, "event must be an Event, not dict"):
        validate_event({"msg": {"type": "x"}})  # type: ignore[arg-type]


def test_limit_must_be_positive() -> None:
    validate_limit(1, "event journal page")
    validate_limit(2**63 - 2, "event journal page")
    for limit in (0, -1):
        with fails(InvalidInputError, "event journal page limit must be positive"):
            validate_limit(limit, "event journal page")


def test_limit_is_an_integer_within_i64() -> None:
    with fails(InvalidInputError, "transcript page limit must be an integer, not bool"):
        validate_limit(True, "transcript page")
    with fails(InvalidInputError, "transcript page limit must be an integer, not float"):
        validate_limit(10.0, "transcript page")
    with fails(InvalidInputError, "transcript page limit exceeds i64"):
        validate_limit(2**63 - 1, "transcript page")


def test_sequence_is_non_negative_i64() -> None:
    assert validate_sequence(0, "before sequence") == 0
    assert validate_sequence(2**63 - 1, "before sequence") == 2**63 - 1
    with fails(InvalidInputError, "fork parent sequence cannot be negative"):
        validate_sequence(-1, "fork parent sequence")
    with fails(InvalidInputError, "fork parent sequence exceeds i64"):
        validate_sequence(2**63, "fork parent sequence")


# --- forks -------------------------------------------------------------------------------


def clean_child(**changes: Any) -> Checkpoint:
    return replace(Checkpoint.empty("child", owner_id="cli"), context=[{"n": 1}], **changes)


def test_fork_cannot_fork_itself() -> None:
    validate_fork_child("parent", clean_child())
    with fails(ContractViolationError, "a session cannot fork itself"):
        validate_fork_child("child", clean_child())


def test_fork_parent_id_is_validated() -> None:
    with fails(InvalidInputError, "fork parent session id cannot be empty"):
        validate_fork_child("", clean_child())


@pytest.mark.parametrize(
    "unclean",
    [
        {"sequence": 1},
        {"active_execution": active_execution()},
        {"pending_approval": {"request_id": "r1"}},
        {"pending_messages": [queued()]},
    ],
)
def test_fork_child_must_be_clean(unclean: dict[str, Any]) -> None:
    validate_fork_child("parent", clean_child(metadata={"kept": True}, first_user_message="hi"))
    with fails(ContractViolationError, "a fork must begin at a clean sequence-zero checkpoint"):
        validate_fork_child("parent", clean_child(**unclean))


# --- the fast JSON check agrees with the precise walk ----------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from journal import validate as _validate  # noqa: E402

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=5),
    st.sampled_from(["\ud800", "a\udfffb", b"bytes", (1, 2), {1, 2}]),
)
_json_like = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.sampled_from([1, "\ud800", "é"])),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=25,
)


# reaches inside: the fast check and the precise walk are compared with each other
@settings(max_examples=400, deadline=None)
@given(_json_like)
def test_fast_json_check_never_accepts_what_the_precise_walk_rejects(value: Any) -> None:
    try:
        _validate._walk_json_slowly(value, "v", allow_structs=False)
        precise_ok = True
    except InvalidInputError:
        precise_ok = False
    if _validate._plain_json(value, False):
        assert precise_ok, f"fast check accepted {value!r}"
    # and the public check is exactly the precise one
    try:
        _validate.check_json_value(value, "v")
        assert precise_ok
    except InvalidInputError:
        assert not precise_ok


# reaches inside: the fast check itself must stop at the depth limit and at cycles
def test_fast_json_check_bounds_depth_and_cycles() -> None:
    deep: Any = []
    for _ in range(_validate.MAX_JSON_DEPTH + 5):
        deep = [deep]
    assert not _validate._plain_json(deep, False)
    with pytest.raises(InvalidInputError, match="nesting is deeper"):
        _validate.check_json_value(deep, "v")
    cycle: list[Any] = []
    cycle.append(cycle)
    assert not _validate._plain_json(cycle, False)
    with pytest.raises(InvalidInputError):
        _validate.check_json_value(cycle, "v")
