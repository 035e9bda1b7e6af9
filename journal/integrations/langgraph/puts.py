"""What one `put` commits: a journal checkpoint and its `langgraph_checkpoint` event.

The journal checkpoint's context holds the items of the context channel, each
serialised; its event holds everything else of the LangGraph checkpoint
(ids, parent, metadata, the header and the other channels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint as LGCheckpoint
from langgraph.checkpoint.base import CheckpointMetadata, get_serializable_checkpoint_metadata

from journal import CHECKPOINT_VERSION, Checkpoint, SessionContext

from .copymark import COPY_OF
from .events import checkpoint_msg
from .naming import ORIGIN_LABEL
from .serde import ItemCodec


@dataclass
class PutCall:
    """What one `put` commits, whatever the head it lands on."""

    sid: str
    thread_id: str
    ns: str
    checkpoint_id: str
    msg: dict[str, Any]  # its event (`seq`, `fp` and `ctx` are set per try)
    ctx_channel: str | None
    listed: list[Any]  # the items of the context channel
    first_user: str | None


def prepare(
    codec: ItemCodec,
    target: tuple[str, str, str],
    config: RunnableConfig,
    checkpoint: LGCheckpoint,
    metadata: CheckpointMetadata,
    context_channel: str | None,
) -> PutCall:
    """The put of `checkpoint` into the session `target` (sid, thread id, namespace):
    everything but the context channel serialised once, whatever the tries."""
    sid, thread_id, ns = target
    parent = (config.get("configurable") or {}).get("checkpoint_id")
    values: dict[str, Any] = dict(checkpoint.get("channel_values") or {})
    ctx_channel: str | None = None
    listed: list[Any] = []
    first_user: str | None = None
    if context_channel is not None and isinstance(values.get(context_channel), list):
        ctx_channel = context_channel
        listed = values.pop(context_channel)
        first_user = _first_user_message(listed)
    header = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    md = get_serializable_checkpoint_metadata(config, metadata)
    msg = checkpoint_msg(
        checkpoint["id"],
        parent,
        checkpoint.get("ts"),
        codec.encode_metadata(dict(md)),
        codec.dump(header),
        {k: codec.dump(v) for k, v in values.items()},
        ctx_channel,
    )
    return PutCall(sid, thread_id, ns, checkpoint["id"], msg, ctx_channel, listed, first_user)


def journal_checkpoint(
    call: PutCall, owner_id: str, seq: int, items: list[Any], epoch: int
) -> Checkpoint:
    """The journal checkpoint of `call` at sequence `seq`, with context `items`."""
    return Checkpoint(
        version=CHECKPOINT_VERSION,
        session_id=call.sid,
        session_context=SessionContext(owner_id=owner_id, origin_label=ORIGIN_LABEL),
        sequence=seq,
        context=items,
        context_epoch=epoch,
        first_user_message=call.first_user,
        metadata={
            "langgraph": {
                "thread_id": call.thread_id,
                "checkpoint_ns": call.ns,
                "checkpoint_id": call.checkpoint_id,
                "context_channel": call.ctx_channel,
            }
        },
    )


def placeholder(
    sid: str, thread_id: str, ns: str, owner_id: str, *, copy_of: str | None = None
) -> Checkpoint:
    """The empty sequence-0 checkpoint a thread namespace's session starts with
    (`copy_of`: the source thread, for the root of a copy: `copymark`)."""
    cp = Checkpoint(
        version=CHECKPOINT_VERSION,
        session_id=sid,
        session_context=SessionContext(owner_id=owner_id, origin_label=ORIGIN_LABEL),
    )
    lg: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if copy_of is not None:
        lg[COPY_OF] = copy_of
    cp.metadata = {"langgraph": lg}
    return cp


def _first_user_message(messages: list[Any]) -> str | None:
    """The text of the first human message (shown by `journal ls`), if any."""
    for m in messages[:8]:
        if getattr(m, "type", None) == "human":
            content = getattr(m, "content", None)
            if isinstance(content, str) and content.strip():
                return content[:200]
            return None
    return None
