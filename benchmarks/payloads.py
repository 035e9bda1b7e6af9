"""Deterministic, mobius-shaped payloads shared by both sides of the benchmark.

Everything here is plain JSON data (dicts, lists, str, int, bool, None) built from a seeded
`random.Random`, so the SQLite baseline and `journal` store byte-for-byte the same logical
content in every run. Text is English-like (Zipf-weighted words, sentences, a little code), not
random bytes, so compression ratios are realistic.

Shapes follow mobius 0.16.33 (`CHECKPOINT_VERSION = 20`, no `compaction_count`): see
`reference/mobius-api.md` §1. This module never imports `journal`; to hand a payload to the
journal side, convert it there:

    checkpoint = convert(args.checkpoint, journal.types.Checkpoint)
    events = convert(timestamped(args.events), list[journal.types.TimestampedEvent])

or all at once with `SaveArgs.convert(...)`. Convert outside the timed region.

Main entry points:

- `PayloadGenerator(seed)`: single payloads (`event`, `timestamped_events`, `turn_events`,
  `transcript_item(s)`, `execution_record`, `checkpoint`, `metadata`, `text`).
- `SessionSim(gen, session_id)`: one agent session over time; `next_save()` returns the
  `SaveArgs` of its next durable loop boundary (checkpoint ~50 KiB whose context grows by the
  transcript items of each save), `compact()` bumps the context epoch, `fork_checkpoint()`
  builds a clean child.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

__all__ = [
    "BASE_TIME_MS",
    "CHECKPOINT_BYTES",
    "CHECKPOINT_VERSION",
    "EVENT_BYTES",
    "ITEM_BYTES",
    "PLAIN_EVENT_KINDS",
    "PayloadGenerator",
    "SaveArgs",
    "SessionSim",
    "TimestampedEvents",
    "convert",
    "encoded_size",
    "timestamped",
]

Json = Any
TimestampedEvents = list[tuple[int, dict[str, Json]]]

CHECKPOINT_VERSION = 20
"""mobius 0.16.33's checkpoint version (19 in 0.16.27, which still had `compaction_count`)."""

KIB = 1024
EVENT_BYTES = 1 * KIB
ITEM_BYTES = 1 * KIB
CHECKPOINT_BYTES = 50 * KIB
METADATA_BYTES = 8 * KIB
BASE_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z; the generator's clock starts here.

PLAIN_EVENT_KINDS: tuple[str, ...] = ("assistant_content_delta", "tool_call_begin", "tool_call_end")
"""Kinds `event()` draws from by default: they trigger no journal compaction, so every appended
event stays retained (what the paging-depth workloads need)."""
_PLAIN_EVENT_WEIGHTS = (6, 2, 2)

_VOCABULARY = """
the of and to a in is it you that he was for on are with as his they be at one have this from or
had by not word but what some we can out other were all there when up use your how said an each
she which do their time if will way about many then them write would like so these her long make
thing see him two has look more day could go come did number sound no most people my over know
water than call first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under name very
through just form sentence great think say help low line differ turn cause much mean before move
right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light
kind off need house picture try us again animal point mother world near build self earth father
file function test error build module config request response session agent model tool call
output input context token cache index value check change commit branch merge review patch diff
update return result string number list path directory store journal event sequence checkpoint
should could would because however therefore while during before after since until although
first then next finally also instead maybe probably likely actually simply
"""
_WORDS = _VOCABULARY.split()
_WORD_WEIGHTS = list(itertools.accumulate(1.0 / (rank + 2.0) for rank in range(len(_WORDS))))
_CODE_SNIPPETS = (
    "`cargo test --workspace`",
    "`src/backend/checkpoint/sqlite.rs`",
    "`fn save_with_events(&self, checkpoint: Arc<Checkpoint>)`",
    "`git diff --stat HEAD~1`",
    "`pytest -q tests/test_store.py`",
    "`let sequence = latest.checked_add(1)?;`",
    "`ORDER BY sequence DESC LIMIT ?3`",
    "`os.fsync(fd)`",
)
_TOOLS = ("shell", "apply_patch", "read_file", "search", "update_plan", "web_fetch")
_PHASES = ("reasoning", "commentary", "final_answer")


def convert(value: Json, type_: Any) -> Any:
    """Convert plain payload data into a typed value (e.g. a `journal.types` Struct).

    A thin wrapper over `msgspec.convert`, so callers need no msgspec import of their own.
    """
    return msgspec.convert(value, type_)


def timestamped(events: Sequence[tuple[int, dict[str, Json]]]) -> list[dict[str, Json]]:
    """`(recorded_at_ms, event)` pairs as mobius `TimestampedEvent` JSON objects."""
    return [{"recorded_at_ms": at, "event": event} for at, event in events]


def encoded_size(value: Json) -> int:
    """Bytes of `value` as compact JSON."""
    return len(msgspec.json.encode(value))


class SaveArgs(NamedTuple):
    """The arguments of one `save_with_events` call, as plain data.

    Unpacks straight into the SQLite baseline: `store.save_with_events(*args)`.
    """

    checkpoint: dict[str, Json]
    transcript_delta: list[dict[str, Json]]
    execution: dict[str, Json] | None
    events: TimestampedEvents

    def convert(
        self,
        checkpoint_type: Any,
        *,
        execution_type: Any = None,
        timestamped_event_type: Any = None,
    ) -> tuple[Any, list[dict[str, Json]], Any, Any]:
        """The same arguments typed for another backend.

        Types left as None keep that part as plain data; events become
        `list[timestamped_event_type]` when that type is given.
        """
        checkpoint = convert(self.checkpoint, checkpoint_type)
        execution: Any = self.execution
        if execution is not None and execution_type is not None:
            execution = convert(execution, execution_type)
        events: Any = self.events
        if timestamped_event_type is not None:
            events = convert(timestamped(self.events), list[timestamped_event_type])
        return checkpoint, self.transcript_delta, execution, events


class PayloadGenerator:
    """Seeded source of mobius-shaped payloads. Same seed, same calls: same data."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.clock_ms = BASE_TIME_MS
        self._ids = itertools.count(1)

    # ----------------------------------------------------------------------------- primitives

    def tick(self, low: int = 5, high: int = 120) -> int:
        """Advance the deterministic wall clock (Unix ms) and return it."""
        self.clock_ms += self.rng.randint(low, high)
        return self.clock_ms

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):08d}"

    def sentence(self) -> str:
        words = self.rng.choices(_WORDS, cum_weights=_WORD_WEIGHTS, k=self.rng.randint(6, 22))
        if self.rng.random() < 0.12:
            words.insert(self.rng.randrange(len(words)), self.rng.choice(_CODE_SNIPPETS))
        if self.rng.random() < 0.08:
            words.append(str(self.rng.randint(2, 4096)))
        text = " ".join(words)
        return text[0].upper() + text[1:] + self.rng.choice(".....?!:")

    def text(self, nbytes: int) -> str:
        """English-like text of about `nbytes` UTF-8 bytes (cut at a word boundary)."""
        if nbytes <= 0:
            return ""
        parts: list[str] = []
        size = 0
        while size < nbytes:
            part = self.sentence()
            if self.rng.random() < 0.15:
                part += "\n\n"
            parts.append(part)
            size += len(part) + 1
        text = " ".join(parts)[:nbytes]
        cut = text.rfind(" ")
        return text[:cut] if cut > nbytes // 2 else text

    def _fill(self, value: dict[str, Json], setter: Any, size: int) -> dict[str, Json]:
        """Set the text field (through `setter`) so that `value` encodes to about `size` bytes."""
        setter("")
        setter(self.text(size - encoded_size(value)))
        return value

    def token_usage(self, scale: int = 1) -> dict[str, int]:
        input_tokens = self.rng.randint(2_000, 60_000) * scale
        cached = self.rng.randint(0, input_tokens)
        output = self.rng.randint(50, 4_000) * scale
        reasoning = self.rng.randint(0, output)
        return {
            "input_tokens": input_tokens,
            "cached_input_tokens": cached,
            "cache_write_input_tokens": self.rng.randint(0, 2_000),
            "output_tokens": output,
            "reasoning_output_tokens": reasoning,
            "total_tokens": input_tokens + output,
        }

    # --------------------------------------------------------------------------------- events

    def event(
        self,
        session_id: str,
        kind: str | None = None,
        *,
        turn_id: str = "turn-00000001",
        model_step_id: str = "step-00000001",
        submission_id: str | None = "sub-00000001",
        size: int = EVENT_BYTES,
    ) -> dict[str, Json]:
        """One `Event` (`{"submission_id", "msg": {"type": kind, ...}}`).

        Kinds with free text (deltas, tool calls, messages, warnings) are padded to about `size`
        bytes of JSON; control kinds (turn_started, token_count, ...) keep their natural size.
        `kind=None` draws from `PLAIN_EVENT_KINDS`.
        """
        if kind is None:
            kind = self.rng.choices(PLAIN_EVENT_KINDS, weights=_PLAIN_EVENT_WEIGHTS)[0]
        msg: dict[str, Json] = {"type": kind}
        event: dict[str, Json] = {"msg": msg}
        if submission_id is not None:
            event = {"submission_id": submission_id, "msg": msg}
        step = {"session_id": session_id, "turn_id": turn_id, "model_step_id": model_step_id}
        if kind == "assistant_content_delta":
            msg.update(step, delta="", phase=self.rng.choice(_PHASES))
            return self._fill(event, lambda text: msg.__setitem__("delta", text), size)
        if kind == "tool_call_begin":
            name = self.rng.choice(_TOOLS)
            arguments: dict[str, Json] = {"workdir": "/src/app", "timeout_ms": 120_000}
            msg.update(turn_id=turn_id, call_id=self.new_id("call"), name=name)
            msg["arguments"] = arguments
            return self._fill(event, lambda text: arguments.__setitem__("input", text), size)
        if kind == "tool_call_end":
            part: dict[str, Json] = {"type": "text", "text": ""}
            msg.update(turn_id=turn_id, call_id=self.new_id("call"), name=self.rng.choice(_TOOLS))
            msg.update(output=[part], is_error=self.rng.random() < 0.05)
            return self._fill(event, lambda text: part.__setitem__("text", text), size)
        if kind == "assistant_message":
            content: dict[str, Json] = {
                "output_index": 0,
                "part_index": 0,
                "phase": "final_answer",
                "text": "",
                "annotations": [],
            }
            msg.update(step, content=[content])
            return self._fill(event, lambda text: content.__setitem__("text", text), size)
        if kind in ("message", "message_delta"):
            if kind == "message":
                msg.update(author={"kind": "user", "id": "user-1"}, delivery="turn")
                msg.update(attachments=[], reply=None)
            msg["text"] = ""
            return self._fill(event, lambda text: msg.__setitem__("text", text), size)
        if kind in ("warning", "submission_rejected"):
            msg["message"] = ""
            return self._fill(event, lambda text: msg.__setitem__("message", text), size)
        if kind == "model_step_started":
            msg.update(step, step_index=self.rng.randint(0, 40), started_at_ms=self.clock_ms)
        elif kind == "model_step_completed":
            outcome = {
                "type": "completed",
                "end_turn": self.rng.random() < 0.3,
                "tool_call_ids": [self.new_id("call")],
                "usage": self.token_usage(),
            }
            msg.update(step, completed_at_ms=self.clock_ms, outcome=outcome)
        elif kind == "token_count":
            info = {
                "total_token_usage": self.token_usage(scale=8),
                "last_token_usage": self.token_usage(),
                "model_context_window": 272_000,
            }
            msg.update(info=info, rate_limits=None)
        elif kind == "turn_started":
            msg.update(turn_id=turn_id, model_context_window=272_000)
        elif kind in ("turn_complete", "turn_aborted"):
            msg["turn_id"] = turn_id
            if kind == "turn_aborted":
                msg["reason"] = "interrupted by restart"
        elif kind == "session_history":
            msg["events"] = []
        return event

    def timestamped_events(
        self, session_id: str, n: int, kind: str | None = None, **event_options: Any
    ) -> TimestampedEvents:
        """`n` `(recorded_at_ms, event)` pairs, ~1 KiB each, at increasing times."""
        return [(self.tick(), self.event(session_id, kind, **event_options)) for _ in range(n)]

    def turn_events(self, session_id: str, deltas: int = 20) -> TimestampedEvents:
        """One whole turn as the runtime journals it, compaction triggers included.

        turn_started, message, model_step_started, `deltas` x assistant_content_delta,
        model_step_completed (gets stream metrics from the deltas), assistant_message (removes
        the step's deltas), tool_call_begin/end, token_count (replaces older ones),
        turn_complete.
        """
        turn_id = self.new_id("turn")
        step_id = self.new_id("step")
        submission_id = self.new_id("sub")
        kinds = [
            "turn_started",
            "message",
            "model_step_started",
            *(["assistant_content_delta"] * deltas),
            "model_step_completed",
            "assistant_message",
            "tool_call_begin",
            "tool_call_end",
            "token_count",
            "turn_complete",
        ]
        return [
            (
                self.tick(),
                self.event(
                    session_id,
                    kind,
                    turn_id=turn_id,
                    model_step_id=step_id,
                    submission_id=submission_id,
                ),
            )
            for kind in kinds
        ]

    # ----------------------------------------------------------------------------- transcript

    def transcript_item(self, kind: str | None = None, size: int = ITEM_BYTES) -> dict[str, Json]:
        """One model-context / transcript item (Responses-API shaped), ~`size` bytes of JSON."""
        if kind is None:
            kind = self.rng.choices(
                ("user", "assistant", "function_call", "function_call_output"),
                weights=(2, 3, 2, 3),
            )[0]
        if kind in ("user", "assistant"):
            part: dict[str, Json] = {"type": "input_text" if kind == "user" else "output_text"}
            part["text"] = ""
            item: dict[str, Json] = {"type": "message", "role": kind, "content": [part]}
            return self._fill(item, lambda text: part.__setitem__("text", text), size)
        if kind == "function_call":
            command = ["bash", "-lc", ""]
            arguments: dict[str, Json] = {"cmd": command, "workdir": "/src/app"}
            item = {"type": "function_call", "call_id": self.new_id("call"), "arguments": ""}
            item["name"] = self.rng.choice(_TOOLS)

            def set_arguments(text: str) -> None:
                command[2] = text
                item["arguments"] = msgspec.json.encode(arguments).decode()

            return self._fill(item, set_arguments, size)
        output: dict[str, Json] = {"type": "input_text", "text": ""}
        item = {"type": "function_call_output", "call_id": self.new_id("call"), "output": [output]}
        return self._fill(item, lambda text: output.__setitem__("text", text), size)

    def transcript_items(self, n: int, size: int = ITEM_BYTES) -> list[dict[str, Json]]:
        return [self.transcript_item(size=size) for _ in range(n)]

    # ------------------------------------------------------------------- checkpoint and friends

    def execution_record(
        self,
        session_id: str,
        *,
        submission_id: str | None = None,
        turn_id: str | None = None,
        outcome: str = "completed",
    ) -> dict[str, Json]:
        """A valid `ExecutionRecord` (elapsed == finished - started, failed <= tool calls)."""
        started = self.clock_ms
        finished = self.tick(500, 90_000)
        tool_calls = self.rng.randint(0, 12)
        return {
            "session_id": session_id,
            "submission_id": submission_id or self.new_id("sub"),
            "author": {"kind": "user", "id": "user-1"},
            "turn_id": turn_id or self.new_id("turn"),
            "started_at_ms": started,
            "finished_at_ms": finished,
            "elapsed_ms": finished - started,
            "outcome": outcome,
            "model_calls": self.rng.randint(1, 8),
            "tool_calls": tool_calls,
            "failed_tool_calls": self.rng.randint(0, tool_calls),
            "usage": self.token_usage(),
        }

    def session_context(self, owner_id: str) -> dict[str, Json]:
        return {
            "owner_id": owner_id,
            "tenant_id": "tenant-1",
            "user_id": owner_id,
            "user_name": "Ada Lovelace",
            "workspace_id": "ws-7",
            "workspace_label": "journal",
            "origin_label": "cli",
        }

    def metadata(self, nbytes: int = METADATA_BYTES) -> dict[str, Json]:
        """Host metadata: a tool catalog with descriptions, plus a few labels."""
        tools: list[dict[str, Json]] = []
        size = 0
        while size < nbytes:
            name = f"{self.rng.choice(_TOOLS)}_{len(tools)}"
            tool = {"name": name, "description": self.text(self.rng.randint(200, 600))}
            tools.append(tool)
            size += encoded_size(tool)
        return {"host.tools": tools, "host.name": "mobius-cli", "ui.theme": "dark"}

    def checkpoint(
        self,
        session_id: str,
        *,
        sequence: int = 0,
        owner_id: str = "owner-0",
        context: list[dict[str, Json]] | None = None,
        context_epoch: int = 0,
        metadata: dict[str, Json] | None = None,
        first_user_message: str | None = None,
        execution_stats: dict[str, Json] | None = None,
        total_usage: dict[str, int] | None = None,
        pending_messages: list[dict[str, Json]] | None = None,
        last_context_rewrite: dict[str, Json] | None = None,
    ) -> dict[str, Json]:
        """An idle `Checkpoint` (mobius 0.16.33 fields, in declaration order)."""
        return {
            "version": CHECKPOINT_VERSION,
            "session_id": session_id,
            "session_context": self.session_context(owner_id),
            "metadata": {} if metadata is None else metadata,
            "catalog_visible": True,
            "first_user_message": first_user_message,
            "model_route": "openai/gpt-5",
            "context_model_route": "openai/gpt-5",
            "sequence": sequence,
            "context": [] if context is None else context,
            "delivered_once": {},
            "context_epoch": context_epoch,
            "last_context_rewrite": last_context_rewrite,
            "total_usage": total_usage or _zero_usage(),
            "last_usage": None,
            "pending_messages": [] if pending_messages is None else pending_messages,
            "active_execution": None,
            "active_model_step": None,
            "execution_stats": execution_stats or _zero_stats(),
            "pending_tools": [],
            "pending_approval": None,
        }

    def queued_message(self, owner: str, submission_id: str) -> dict[str, Json]:
        """A `QueuedMessage` (its `id` is the submission id that gets a receipt)."""
        return {
            "owner": owner,
            "id": submission_id,
            "boundary": {"type": "queue"},
            "author": {"kind": "user", "id": "user-1"},
            "message": self.text(300),
            "attachments": [],
            "reply": None,
        }


def _zero_usage() -> dict[str, int]:
    return dict.fromkeys(
        (
            "input_tokens",
            "cached_input_tokens",
            "cache_write_input_tokens",
            "output_tokens",
            "reasoning_output_tokens",
            "total_tokens",
        ),
        0,
    )


def _zero_stats() -> dict[str, Json]:
    stats: dict[str, Json] = dict.fromkeys(
        (
            "run_count",
            "failed_run_count",
            "aborted_run_count",
            "model_calls",
            "tool_calls",
            "failed_tool_calls",
            "elapsed_ms",
        ),
        0,
    )
    stats["usage"] = _zero_usage()
    return stats


def _add_usage(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    return {key: total[key] + more[key] for key in total}


class SessionSim:
    """One agent session over time, producing the arguments of each durable save.

    The first save (sequence 0) stores a base context of `context_bytes` (~40 KiB of ~1 KiB
    items, also written as the first transcript batch) and `metadata_bytes` of metadata, so the
    checkpoint starts near 50 KiB. Every later save appends `items` new transcript items to both
    the transcript delta and the context (the same dict objects: items are immutable once
    saved), so within an epoch the stored context is a growing prefix. `compact()` starts a new
    epoch with a summary plus the newest items.
    """

    def __init__(
        self,
        gen: PayloadGenerator,
        session_id: str,
        *,
        owner_id: str = "owner-0",
        context_bytes: int = CHECKPOINT_BYTES - METADATA_BYTES - 2 * KIB,
        metadata_bytes: int = METADATA_BYTES,
        items: int = 2,
        events: int = 4,
    ) -> None:
        self.gen = gen
        self.session_id = session_id
        self.owner_id = owner_id
        self.items = items
        self.events = events
        self.sequence = -1
        self.context_epoch = 0
        self.last_context_rewrite: dict[str, Json] | None = None
        self.context: list[dict[str, Json]] = [gen.transcript_item("user")]
        self.context += gen.transcript_items(max(0, context_bytes // ITEM_BYTES - 1))
        self.transcript: list[dict[str, Json]] = []
        self.metadata = gen.metadata(metadata_bytes)
        self.first_user_message = gen.text(120)
        self.stats = _zero_stats()
        self.total_usage = _zero_usage()

    def next_save(
        self,
        *,
        items: int | None = None,
        events: int | None = None,
        execution: bool = False,
        pending_message: bool = False,
    ) -> SaveArgs:
        """Arguments of the next save: sequence + 1, new items, events, optional turn record."""
        gen = self.gen
        self.sequence += 1
        if self.sequence == 0:
            delta = list(self.context)
        else:
            delta = gen.transcript_items(self.items if items is None else items)
            self.context.extend(delta)
        self.transcript.extend(delta)
        n_events = self.events if events is None else events
        journal_events = gen.timestamped_events(self.session_id, n_events)
        record = None
        if execution:
            record = gen.execution_record(self.session_id)
            self._fold(record)
        pending = []
        if pending_message:
            pending.append(gen.queued_message(self.owner_id, gen.new_id("sub")))
        checkpoint = gen.checkpoint(
            self.session_id,
            sequence=self.sequence,
            owner_id=self.owner_id,
            context=list(self.context),
            context_epoch=self.context_epoch,
            metadata=self.metadata,
            first_user_message=self.first_user_message,
            execution_stats=dict(self.stats),
            total_usage=self.total_usage,
            pending_messages=pending,
            last_context_rewrite=self.last_context_rewrite,
        )
        return SaveArgs(checkpoint, delta, record, journal_events)

    def compact(self, keep: int = 4) -> None:
        """Rewrite the context (summary + newest `keep` items) under a new epoch."""
        self.context_epoch += 1
        self.last_context_rewrite = {"epoch": self.context_epoch, "reasons": ["compaction"]}
        summary = self.gen.transcript_item("user", size=4 * ITEM_BYTES)
        self.context = [summary, *self.context[-keep:]] if keep else [summary]

    def fork_checkpoint(self, child_id: str, items: int | None = None) -> dict[str, Json]:
        """A clean sequence-0 child whose context is the first `items` transcript items."""
        prefix = self.transcript if items is None else self.transcript[:items]
        child = self.gen.checkpoint(
            child_id,
            owner_id=self.owner_id,
            context=list(prefix),
            metadata=self.metadata,
            first_user_message=self.first_user_message,
        )
        child["session_context"]["origin_label"] = None
        return child

    def _fold(self, record: dict[str, Json]) -> None:
        stats = dict(self.stats)
        stats["run_count"] += 1
        stats["failed_run_count"] += record["outcome"] == "failed"
        stats["aborted_run_count"] += record["outcome"] == "aborted"
        for key in ("model_calls", "tool_calls", "failed_tool_calls", "elapsed_ms"):
            stats[key] += record[key]
        stats["usage"] = _add_usage(stats["usage"], record["usage"])
        self.stats = stats
        self.total_usage = _add_usage(self.total_usage, record["usage"])
