"""The `ConversationStore` contract, run against pydantic-ai's `InMemoryConversationStore`
and `JournalConversationStore` alike, so the two are held to the same answers.

pydantic-ai-slim 2.68 ships no tests, and the public pydantic-ai repository (mirrored
up to v2.33) has no `conversation_store` module or tests yet, so the behaviours here
are those the module's docstrings and its in-memory backend define: load and save
around runs, appending only new messages, revisions and conflicts, scopes, limits,
histories rewritten into branches, `branch`, `fork` (sharing entries), listing,
deletion (forks outliving their source) and the storage primitives' own errors.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.conversation import Conversation, ConversationTypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage

from journal.integrations.pydantic_ai import JournalConversationStore

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["memory", "journal"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConversationStore]:
    if request.param == "memory":
        yield InMemoryConversationStore()
        return
    s = JournalConversationStore(tmp_path / "store", durability="os")
    yield s
    s.close()


T = datetime.datetime(
    2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc
)  # messages compare by value


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text, timestamp=T)])


def reply(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], timestamp=T)


def turn(n: int) -> list[ModelMessage]:
    return [user(f"question {n}"), reply(f"answer {n}")]


async def saved(store: ConversationStore, cid: str, turns: int, **kw: object) -> Conversation:
    """A conversation of `turns` turns saved one turn per save, as loaded afterwards."""
    conversation = Conversation(conversation_id=cid)
    for n in range(turns):
        conversation.messages.extend(turn(n))
        await store.save(conversation, **kw)  # type: ignore[arg-type]
    loaded = await store.load(cid)
    assert loaded is not None
    return loaded


def texts(conversation: Conversation | None) -> list[str]:
    assert conversation is not None
    out = []
    for message in conversation.messages:
        for part in message.parts:
            out.append(str(part.content))  # type: ignore[union-attr]
    return out


# ------------------------------------------------------------------ load and save
async def test_missing_conversation_loads_as_none(store: ConversationStore) -> None:
    assert await store.load("nope") is None
    assert await store.load_entries("nope") is None
    assert await store.read_record("nope") is None


async def test_save_returns_the_entries_it_stored_chained(store: ConversationStore) -> None:
    conversation = Conversation(conversation_id="c", messages=turn(0))
    entries = await store.save(conversation)
    assert [e.message for e in entries] == turn(0)
    assert entries[0].parent_id is None and entries[1].parent_id == entries[0].id
    assert conversation.revision is not None and conversation.new_message_index == 2
    loaded = await store.load("c")
    assert loaded is not None and loaded.messages == turn(0)
    assert loaded.revision == conversation.revision
    assert [e.id for e in await store.load_entries("c") or []] == [e.id for e in entries]


async def test_a_second_save_appends_only_the_new_messages(store: ConversationStore) -> None:
    conversation = Conversation(conversation_id="c", messages=turn(0))
    first = await store.save(conversation)
    conversation.messages.extend(turn(1))
    second = await store.save(conversation)
    assert [e.message for e in second] == turn(1)
    assert second[0].parent_id == first[-1].id
    assert await store.save(conversation) == []  # nothing new
    entries = await store.load_entries("c")
    assert entries is not None and [e.id for e in entries] == [e.id for e in first + second]


async def test_usage_and_revision_round_trip(store: ConversationStore) -> None:
    usage = RunUsage(requests=3, input_tokens=10, output_tokens=5, tool_calls=2)
    conversation = Conversation(conversation_id="c", messages=turn(0), usage=usage)
    await store.save(conversation)
    loaded = await store.load("c")
    assert loaded is not None and loaded.usage == usage
    record = await store.read_record("c")
    assert record is not None and record.revision == loaded.revision
    assert record.head_id is not None and record.format_version == 1


async def test_stale_revision_conflicts(store: ConversationStore) -> None:
    await saved(store, "c", 1)
    a = await store.load("c")
    b = await store.load("c")
    assert a is not None and b is not None
    a.messages.extend(turn(1))
    await store.save(a)
    b.messages.extend(turn(2))
    with pytest.raises(ConversationConflict) as info:
        await store.save(b)
    assert info.value.conversation_id == "c"
    assert texts(await store.load("c"))[-1] == "answer 1"  # the loser changed nothing


async def test_saving_an_unloaded_conversation_over_a_stored_one_conflicts(
    store: ConversationStore,
) -> None:
    await saved(store, "c", 1)
    with pytest.raises(ConversationConflict):
        await store.save(Conversation(conversation_id="c", messages=turn(5)))


async def test_limit_loads_the_tail_and_saves_to_the_whole(store: ConversationStore) -> None:
    await saved(store, "c", 3)
    tail = await store.load("c", limit=3)
    assert texts(tail) == ["answer 1", "question 2", "answer 2"]
    assert tail is not None
    tail.messages.extend(turn(3))
    await store.save(tail)
    assert len(texts(await store.load("c"))) == 8
    assert await store.load("c", limit=0) is not None
    with pytest.raises(UserError):
        await store.load("c", limit=-1)
    with pytest.raises(UserError):
        await store.list_conversations(limit=-1)


async def test_serialized_conversation_is_compared_and_extended(store: ConversationStore) -> None:
    await saved(store, "c", 2)
    loaded = await store.load("c")
    thawed = ConversationTypeAdapter.validate_json(ConversationTypeAdapter.dump_json(loaded))
    thawed.messages.extend(turn(2))
    new = await store.save(thawed)
    assert [e.message for e in new] == turn(2)
    record = await store.read_record("c")
    assert record is not None and record.branches == []


async def test_rewritten_history_leaves_a_branch_to_return_to(store: ConversationStore) -> None:
    await saved(store, "c", 2)
    old = await store.load_entries("c")
    assert old is not None
    loaded = await store.load("c")
    assert loaded is not None
    thawed = ConversationTypeAdapter.validate_json(ConversationTypeAdapter.dump_json(loaded))
    thawed.messages = [*thawed.messages[:2], user("edited"), reply("new answer")]
    new = await store.save(thawed)
    assert new[0].parent_id == old[1].id
    record = await store.read_record("c")
    assert record is not None and record.branches == [old[-1].id]
    assert texts(await store.load("c"))[2:] == ["edited", "new answer"]
    back = await store.branch("c", from_entry=old[-1].id, expected_revision=record.revision)
    assert texts(back)[2:] == ["question 1", "answer 1"]
    record = await store.read_record("c")
    assert record is not None and record.branches == [new[-1].id]


async def test_branch_keeps_a_prefix_and_checks_its_arguments(store: ConversationStore) -> None:
    loaded = await saved(store, "c", 2)
    with pytest.raises(UserError):
        await store.branch("nope", at=1, expected_revision=None)
    with pytest.raises(UserError):
        await store.branch("c", at=9, expected_revision=loaded.revision)
    with pytest.raises(UserError):
        await store.branch("c", expected_revision=loaded.revision)
    with pytest.raises(UserError):
        await store.branch("c", at=1, from_entry="x", expected_revision=loaded.revision)
    with pytest.raises(UserError):
        await store.branch("c", from_entry="not-an-entry", expected_revision=loaded.revision)
    with pytest.raises(ConversationConflict):
        await store.branch("c", at=1, expected_revision="stale")
    branched = await store.branch("c", at=2, expected_revision=loaded.revision)
    assert texts(branched) == ["question 0", "answer 0"]
    branched.messages.extend(turn(7))
    await store.save(branched)
    assert texts(await store.load("c")) == ["question 0", "answer 0", "question 7", "answer 7"]
    with pytest.raises(ConversationConflict):
        await store.branch("c", at=0, expected_revision=loaded.revision)  # the old revision
    record = await store.read_record("c")
    assert record is not None and len(record.branches) == 1
    empty = await store.branch("c", at=0, expected_revision=record.revision)
    assert empty.messages == [] and (await store.read_record("c")).head_id is None  # type: ignore[union-attr]


# --------------------------------------------------------------------------- forks
async def test_fork_shares_the_entries_and_both_carry_on(store: ConversationStore) -> None:
    source = await saved(
        store,
        "c",
        2,
    )
    source.usage = RunUsage(requests=4)
    await store.save(source)
    fork = await store.fork("c", new_conversation_id="f")
    assert fork.messages == source.messages and fork.usage == RunUsage(requests=4)
    mine = await store.load_entries("c")
    theirs = await store.load_entries("f")
    assert mine is not None and theirs is not None
    assert [e.id for e in theirs] == [e.id for e in mine]  # shared, not copied
    record = await store.read_record("f")
    assert record is not None and record.forked_from == "c" and record.forked_at == mine[-1].id
    fork.messages.extend(turn(9))
    await store.save(fork)
    source.messages.extend(turn(8))
    await store.save(source)
    assert texts(await store.load("f"))[-1] == "answer 9"
    assert texts(await store.load("c"))[-1] == "answer 8"
    f_entries = await store.load_entries("f")
    assert f_entries is not None and f_entries[4].parent_id == mine[-1].id


async def test_fork_at_and_from_entry(store: ConversationStore) -> None:
    await saved(store, "c", 3)
    entries = await store.load_entries("c")
    assert entries is not None
    at2 = await store.fork("c", at=2, new_conversation_id="a")
    assert texts(at2) == ["question 0", "answer 0"] and at2.usage == RunUsage()
    at0 = await store.fork("c", at=0, new_conversation_id="z")
    assert at0.messages == []
    record = await store.read_record("z")
    assert record is not None and record.head_id is None and record.forked_at is None
    from_entry = await store.fork("c", from_entry=entries[3].id, new_conversation_id="e")
    assert len(from_entry.messages) == 4
    generated = await store.fork("a")
    assert generated.conversation_id not in {"a", "c"}
    assert texts(await store.load(generated.conversation_id)) == ["question 0", "answer 0"]
    with pytest.raises(ConversationConflict):
        await store.fork("c", new_conversation_id="a")
    with pytest.raises(UserError):
        await store.fork("nope")
    with pytest.raises(UserError):
        await store.fork("c", at=1, from_entry=entries[0].id)
    with pytest.raises(UserError):
        await store.fork("c", at=99)


async def test_fork_of_a_fork_and_of_a_branch_left(store: ConversationStore) -> None:
    await saved(store, "c", 2)
    f1 = await store.fork("c", new_conversation_id="f1")
    f1.messages.extend(turn(5))
    await store.save(f1)
    f2 = await store.fork("f1", at=5, new_conversation_id="f2")
    assert texts(f2)[-1] == "question 5"
    f2.messages.append(reply("other"))
    await store.save(f2)
    assert texts(await store.load("f2")) == [*texts(await store.load("c")), "question 5", "other"]
    # a fork from an entry on a branch the conversation left
    old = await store.load_entries("f1")
    record = await store.read_record("f1")
    assert old is not None and record is not None
    await store.branch("f1", at=1, expected_revision=record.revision)
    left = await store.fork("f1", from_entry=old[-1].id, new_conversation_id="f3")
    assert texts(left) == texts(await store.load("f1"))[:1] + texts(f1)[1:]


# ------------------------------------------------------------------ scope and list
async def test_scope_keeps_a_conversation_to_its_owner(store: ConversationStore) -> None:
    conversation = Conversation(conversation_id="c", messages=turn(0))
    await store.save(conversation, scope="alice")
    assert await store.load("c", scope="bob") is None
    assert await store.load("c", scope="alice") is not None
    assert await store.load("c") is not None
    conversation.messages.extend(turn(1))
    with pytest.raises(ConversationConflict):
        await store.save(conversation, scope="bob")
    await store.save(conversation)  # keeps alice
    record = await store.read_record("c")
    assert record is not None and record.scope == "alice"
    await store.delete("c", scope="bob")  # left as it is
    assert await store.load("c") is not None
    fork = await store.fork("c", new_conversation_id="f", scope="bob", source_scope="alice")
    assert (await store.read_record(fork.conversation_id)).scope == "bob"  # type: ignore[union-attr]
    with pytest.raises(UserError):
        await store.fork("c", source_scope="bob")


async def test_list_is_newest_first_by_scope_and_limit(store: ConversationStore) -> None:
    for cid, scope in [("a", "x"), ("b", "y"), ("c", "x")]:
        await store.save(Conversation(conversation_id=cid, messages=turn(0)), scope=scope)
    a = await store.load("a")
    assert a is not None
    a.messages.extend(turn(1))
    await store.save(a)
    assert [r.conversation_id for r in await store.list_conversations()] == ["a", "c", "b"]
    assert [r.conversation_id for r in await store.list_conversations(scope="x")] == ["a", "c"]
    assert [r.conversation_id for r in await store.list_conversations(limit=2)] == ["a", "c"]
    assert await store.list_conversations(limit=0) == []
    assert await store.list_conversations(scope="nobody") == []


# --------------------------------------------------------------------------- delete
async def test_delete_then_create_again(store: ConversationStore) -> None:
    old = await saved(store, "c", 1)
    await store.delete("c")
    assert await store.load("c") is None
    assert await store.list_conversations() == []
    await store.delete("c")  # nothing to delete: no error
    with pytest.raises(ConversationConflict):
        old.messages.extend(turn(1))
        await store.save(old)  # loaded before the delete
    again = Conversation(conversation_id="c", messages=turn(4))
    await store.save(again)
    assert again.revision != old.revision
    assert texts(await store.load("c")) == ["question 4", "answer 4"]


async def test_forks_outlive_the_conversation_they_share(store: ConversationStore) -> None:
    await saved(store, "c", 2)
    fork = await store.fork("c", new_conversation_id="f")
    grand = await store.fork("f", at=3, new_conversation_id="g")
    await store.delete("c")
    assert await store.load("c") is None
    assert texts(await store.load("f")) == texts(fork)
    await store.delete("f")
    assert texts(await store.load("g")) == texts(grand)
    fork_again = await store.fork("g", new_conversation_id="c")  # the deleted id, reused
    assert texts(fork_again) == texts(grand)
    fork_again.messages.append(reply("more"))
    await store.save(fork_again)
    await store.delete("g")
    assert texts(await store.load("c")) == [*texts(grand), "more"]
    assert [r.conversation_id for r in await store.list_conversations()] == ["c"]
    await store.delete("c")
    assert await store.list_conversations() == []


# ---------------------------------------------------------------- the primitives
async def test_write_record_checks_revision_and_head(store: ConversationStore) -> None:
    entry = ConversationEntry(parent_id=None, message=user("hi"))
    record = ConversationRecord(conversation_id="c", head_id=entry.id)
    with pytest.raises(ConversationConflict):
        await store.write_record(record, expected_revision="no-such-revision")
    with pytest.raises(ConversationConflict):  # the head is nowhere
        await store.write_record(record, expected_revision=None)
    await store.write_record(record, new_entries=[entry], expected_revision=None)
    with pytest.raises(ConversationConflict):
        await store.write_record(record, expected_revision=None)
    assert (await store.read_entry(entry.id)).message == entry.message
    history = await store.read_history(entry.id)
    assert [e.id for e in history] == [entry.id]
    newer = dataclasses.replace(record, revision="r2")
    await store.write_record(newer, expected_revision=record.revision)
    with pytest.raises(ConversationConflict):
        await store.write_record(newer, expected_revision=record.revision)
    with pytest.raises(ConversationConflict):
        await store.delete_record("c", expected_revision=record.revision)
    with pytest.raises(ConversationConflict):
        await store.delete_record("nope", expected_revision="r2")
    await store.delete_record("c", expected_revision="r2")
    assert await store.read_record("c") is None
    with pytest.raises(LookupError):
        await store.read_entry(entry.id)  # no record reaches it: deleted with it


async def test_read_history_limit_and_records(store: ConversationStore) -> None:
    await saved(store, "c", 3)
    record = await store.read_record("c")
    assert record is not None
    assert len(await store.read_history(record.head_id)) == 6
    assert [e.message for e in await store.read_history(record.head_id, limit=2)] == turn(2)
    assert await store.read_history(None) == []
    records = await store.read_records()
    assert [r.conversation_id for r in records] == ["c"]
    assert records[0] == record


async def test_a_record_pointing_into_an_unrelated_conversation(store: ConversationStore) -> None:
    await saved(store, "a", 2)
    a = await store.read_record("a")
    assert a is not None
    await store.save(Conversation(conversation_id="b", messages=turn(7)))
    b = await store.read_record("b")
    assert b is not None
    moved = dataclasses.replace(b, head_id=a.head_id, revision="moved")
    await store.write_record(moved, expected_revision=b.revision)
    assert texts(await store.load("b")) == texts(await store.load("a"))
    extra = ConversationEntry(parent_id=a.head_id, message=reply("x"))
    fresh = ConversationRecord(conversation_id="n", head_id=extra.id)
    await store.write_record(fresh, new_entries=[extra], expected_revision=None)
    assert texts(await store.load("n")) == [*texts(await store.load("a")), "x"]
    await store.delete("a")
    assert texts(await store.load("n"))[-1] == "x"
    assert len(texts(await store.load("b"))) == 4


async def test_returned_objects_are_copies(store: ConversationStore) -> None:
    await saved(store, "c", 1)
    loaded = await store.load("c")
    assert loaded is not None
    loaded.messages[0].parts.clear()  # type: ignore[attr-defined]
    record = await store.read_record("c")
    assert record is not None
    record.branches.append("junk")
    assert texts(await store.load("c")) == ["question 0", "answer 0"]
    assert (await store.read_record("c")).branches == []  # type: ignore[union-attr]


async def test_nested_values_of_returned_messages_are_copies(store: ConversationStore) -> None:
    rows = [{"title": "a", "tags": ["x"]}]
    call = ModelResponse(parts=[ToolCallPart("search", {"q": "x"}, tool_call_id="t1")], timestamp=T)
    ret = ModelRequest(parts=[ToolReturnPart("search", rows, tool_call_id="t1", timestamp=T)])
    conversation = Conversation(conversation_id="c", messages=[user("q"), call, ret, reply("done")])
    await store.save(conversation)
    rows[0]["tags"].append("changed after the save")
    for _ in range(2):  # a second read may come from a cache: it is a copy as well
        loaded = await store.load("c")
        assert loaded is not None
        part = loaded.messages[2].parts[0]
        assert isinstance(part, ToolReturnPart) and part.content == [{"title": "a", "tags": ["x"]}]
        part.content[0]["tags"].append("changed after the load")
        args = loaded.messages[1].parts[0]
        assert isinstance(args, ToolCallPart) and args.args == {"q": "x"}
        args.args["q"] = "changed"  # type: ignore[index]
