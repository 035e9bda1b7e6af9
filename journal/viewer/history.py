"""The viewer's pages of what a session said and became: the conversation, any
historical checkpoint, the diff of two checkpoints, the fork tree and verify.

Like `pages.py`, each function returns a page's HTML, every stored value escaped.
"""

from __future__ import annotations

import json
from typing import Any

from .convo import conversation
from .data import TREE_DEPTH, TREE_NODES, TREE_UP, Data
from .html import (
    a,
    banner,
    dl,
    esc,
    href,
    long_text,
    num,
    page,
    pager,
    raw_json,
    session_tabs,
    sid_path,
    table,
)

_ROLE_LABEL = {"user": "user", "assistant": "assistant", "tool": "tool result", "system": "system"}


# -------------------------------------------------------------- conversation
def message_html(m: dict[str, Any]) -> str:
    """One message (a `convo.Message` as JSON): role, text, its tool calls with their
    results under them, and its raw JSON one click away."""
    role = m["role"]
    label = _ROLE_LABEL.get(role, role)
    if m["answers"] and not m["paired"]:
        label += f" of {m['answers']}"
    parts = [
        f'<article class="msg-item role-{esc(role)}" tabindex="0">'
        f'<header><span class="role">{esc(label)}</span>'
        f'<span class="where">{esc(m["where"])}</span></header>'
    ]
    if m["text"]:
        parts.append(long_text(m["text"]))
    for c in m["calls"]:
        parts.append(
            '<div class="call"><div class="call-head"><span class="tool">⚙ '
            f'{esc(c["name"])}</span> <code class="muted">{esc(c["call_id"] or "")}</code></div>'
            f'<pre class="args">{esc(c["arguments"])}</pre>'
        )
        r = c["result"]
        if r is not None:
            parts.append(
                f'<div class="result"><span class="role">result</span>'
                f'<span class="where">{esc(r["where"])}</span>{long_text(r["text"])}'
                f"{raw_json(r['raw'], 'raw JSON of the result')}</div>"
            )
        else:
            parts.append('<div class="result pending muted">no result in view</div>')
        parts.append("</div>")
    parts.append(raw_json(m["raw"]))
    parts.append("</article>")
    return "".join(parts)


def messages_html(messages: list[dict[str, Any]]) -> str:
    shown = [m for m in messages if not m["paired"]]
    if not shown:
        return '<p class="empty">No messages here.</p>'
    return '<div class="convo nav-rows">' + "".join(message_html(m) for m in shown) + "</div>"


def conversation_page(
    data: Data, sid: str, source: str | None, before: int | None, limit: int, at: int | None
) -> str:
    doc = data.conversation(sid, source=source, before=before, limit=limit, at=at)
    names = {
        "transcript": "transcript",
        "items": "Agents SDK items",
        "context": "checkpoint context",
    }
    tabs = " ".join(
        a(
            href(sid_path(sid, "conversation"), source=s),
            names[s],
            "chip on" if s == doc["source"] else "chip",
        )
        for s in doc["sources"]
    )
    older = None
    if doc["next_before"] is not None:
        older = href(
            sid_path(sid, "conversation"), source=doc["source"], before=doc["next_before"], at=at
        )
    newest = href(sid_path(sid, "conversation"), source=doc["source"], at=at) if before else None
    what = {
        "transcript": "Transcript batches, a page of them; oldest first within the page.",
        "items": "Items of the Agents SDK conversation (its agents.items events).",
        "context": "The checkpoint's context"
        + (f" at sequence {at}" if at is not None else " (latest)")
        + (f", {num(doc['context_items'])} items" if doc["context_items"] is not None else "")
        + ".",
    }[doc["source"]]
    body = (
        f'<h1 class="sid-title">{esc(sid)}</h1>'
        + session_tabs(sid, "conversation")
        + f'<div class="chips">{tabs}</div><p class="muted">{esc(what)}</p>'
        + pager(older, newest)
        + messages_html(doc["messages"])
        + pager(older, newest)
    )
    return page(f"{sid} conversation", body, crumbs=[(sid, sid_path(sid)), ("conversation", None)])


# --------------------------------------------------------------- checkpoints
def checkpoint_page(data: Data, sid: str, at: int | None) -> str:
    latest = data.summary(sid).sequence
    cp = data.checkpoint(sid, at)
    seq = cp["sequence"]
    nav = [
        f'<form class="filters" method="get" action="{esc(sid_path(sid, "checkpoint"))}">'
        f'<label>sequence <input type="number" min="0" name="at" value="{esc(seq)}"'
        f' aria-label="checkpoint sequence" data-filter></label><button type="submit">show</button>'
    ]
    if seq > 0:
        nav.append(
            a(
                href(sid_path(sid, "checkpoint"), at=seq - 1),
                f"← {seq - 1}",
                "btn",
                data_page="prev",
            )
        )
    if seq < latest:
        nav.append(
            a(
                href(sid_path(sid, "checkpoint"), at=seq + 1),
                f"{seq + 1} →",
                "btn",
                data_page="next",
            )
        )
        nav.append(a(sid_path(sid, "checkpoint"), f"latest ({latest})", "btn"))
    nav.append("</form>")
    diffs = []
    if seq > 0:
        diffs.append(
            a(href("/diff", a=sid, at_a=seq - 1, b=sid, at_b=seq), f"diff {seq - 1} → {seq}")
        )
    if seq < latest:
        diffs.append(a(href("/diff", a=sid, at_a=seq, b=sid), f"diff {seq} → latest"))
    header = {k: v for k, v in cp.items() if k != "context"}
    ctx = cp["context"]
    u = cp["total_usage"]
    facts = [
        ("sequence", f"{esc(seq)} of {esc(latest)} · epoch {esc(cp['context_epoch'])}"),
        ("context", f"{num(len(ctx))} items"),
        ("usage", f"{num(u['total_tokens'])} tokens"),
        (
            "pending",
            f"{num(len(cp['pending_messages']))} messages · {num(len(cp['pending_tools']))} tools",
        ),
        ("active", esc("yes" if cp.get("active_execution") else "no")),
    ]
    convo = data.conversation(sid, source="context", at=at, limit=100)
    body = (
        f'<h1 class="sid-title">{esc(sid)}</h1>'
        + session_tabs(sid, "checkpoints")
        + "".join(nav)
        + (f'<p class="diffs">{" · ".join(diffs)}</p>' if diffs else "")
        + dl(facts)
        + raw_json(header, "checkpoint header (raw JSON)")
        + f"<h2>Context (last {num(min(100, len(ctx)))} of {num(len(ctx))})</h2>"
        + (
            f"<p>{a(href(sid_path(sid, 'conversation'), source='context', at=at), 'all →')}</p>"
            if len(ctx) > 100
            else ""
        )
        + messages_html(convo["messages"])
    )
    return page(f"{sid} @{seq}", body, crumbs=[(sid, sid_path(sid)), (f"checkpoint {seq}", None)])


def diff_page(data: Data, a_id: str, at_a: int | None, b_id: str, at_b: int | None) -> str:
    doc = data.diff(a_id, at_a, b_id, at_b)
    form = (
        '<form class="filters diff-form" method="get" action="/diff">'
        f'<input name="a" value="{esc(a_id)}" aria-label="session A" placeholder="session A">'
        f'<input type="number" min="0" name="at_a" value="{esc("" if at_a is None else at_a)}"'
        ' placeholder="latest" aria-label="sequence A">'
        f'<input name="b" value="{esc(b_id)}" aria-label="session B" placeholder="session B">'
        f'<input type="number" min="0" name="at_b" value="{esc("" if at_b is None else at_b)}"'
        ' placeholder="latest" aria-label="sequence B"><button type="submit">diff</button></form>'
    )
    rows = [
        [
            f"<code>{esc(k)}</code>",
            f'<pre class="json del">{esc(json.dumps(v["a"], indent=1, ensure_ascii=False))}</pre>',
            f'<pre class="json add">{esc(json.dumps(v["b"], indent=1, ensure_ascii=False))}</pre>',
        ]
        for k, v in doc["fields"].items()
    ]

    def side(items: list[Any], start: int, cls: str) -> str:
        msgs = conversation([(f"context #{start + i}", it) for i, it in enumerate(items)])
        inner = (
            messages_html([m.to_json() for m in msgs]) if items else '<p class="empty">nothing</p>'
        )
        return f'<div class="side {cls}">{inner}</div>'

    common = doc["common_context_items"]
    same = not doc["fields"] and not doc["only_a"] and not doc["only_b"]
    body = (
        "<h1>Diff</h1>"
        + form
        + f'<p class="diff-labels"><span class="del">- {esc(doc["a"])}</span>'
        f' <span class="add">+ {esc(doc["b"])}</span></p>'
        + (banner("note", "The two checkpoints are the same.") if same else "")
        + "<h2>Fields</h2>"
        + (
            table(["field", doc["a"], doc["b"]], rows, "list diff-fields")
            if rows
            else '<p class="empty">No field differs.</p>'
        )
        + f"<h2>Context</h2><p>{num(common)} items in common, then:</p>"
        + '<div class="diff-cols">'
        + f'<div><h3 class="del">only in {esc(doc["a"])} ({num(len(doc["only_a"]))})</h3>'
        + side(doc["only_a"], common, "del")
        + "</div>"
        + f'<div><h3 class="add">only in {esc(doc["b"])} ({num(len(doc["only_b"]))})</h3>'
        + side(doc["only_b"], common, "add")
        + "</div></div>"
    )
    return page("diff", body, crumbs=[("diff", None)])


# --------------------------------------------------------------------- forks
def tree_page(data: Data, sid: str) -> str:
    doc = data.tree(sid)

    def node(n: dict[str, Any], parent: str | None) -> str:
        me = n["session_id"]
        cls = "node current" if me == sid else "node"
        bits = [
            a(sid_path(me), me, "sid", aria_current="true")
            if me == sid
            else a(sid_path(me), me, "sid")
        ]
        bits.append(f'<span class="muted">@{esc(n["sequence"])}</span>')
        if n["forked_at"] is not None and parent is not None:
            bits.append(
                f'<span class="branch" title="branch point">↳ forked at'
                f" {esc(n['forked_at'])}</span>"
            )
            bits.append(a(href("/diff", a=parent, at_a=n["forked_at"], b=me), "diff", "small"))
        if n["damaged"]:
            bits.append('<span class="badge bad">damaged</span>')
        if n["first_user_message"]:
            msg = n["first_user_message"]
            bits.append(f'<span class="msg">{esc(msg[:80])}</span>')
        kids = "".join(node(k, me) for k in n["children"])
        return (
            f'<li class="{cls}"><div class="node-line">{" ".join(bits)}</div>'
            + (f"<ul>{kids}</ul>" if kids else "")
            + "</li>"
        )

    note = (
        banner(
            "note",
            f"Only {num(doc['nodes'])} sessions are drawn: at most {num(TREE_NODES)},"
            f" {num(TREE_UP)} levels above this one and {num(TREE_DEPTH)} in all.",
        )
        if doc["truncated"]
        else ""
    )
    body = (
        f'<h1 class="sid-title">{esc(sid)}</h1>'
        + session_tabs(sid, "forks")
        + f'<p class="muted">The lineage holding this session: {num(doc["nodes"])} sessions.'
        " A branch point (↳) is the parent's sequence the fork was made from.</p>"
        + note
        + f'<ul class="tree nav-rows">{node(doc["root"], None)}</ul>'
    )
    return page(f"{sid} forks", body, crumbs=[(sid, sid_path(sid)), ("forks", None)])


# -------------------------------------------------------------------- verify
def verify_page(data: Data, sid: str, run: bool) -> str:
    data.summary(sid)
    intro = (
        '<p class="muted">Reads every byte of the session: each record\'s checksum, every'
        " commit, the indexes and the snapshot. Read-only; it may take a while on a long"
        " session.</p>"
    )
    result = ""
    if not run:
        run_url = href(sid_path(sid, "verify"), run=1)
        result = f"<p>{a(run_url, 'Run verify', 'btn primary', data_run='verify')}</p>"
    else:
        doc = data.verify(sid)
        rows = [
            [
                f'<span class="sev {esc(f["severity"])}">{esc(f["severity"])}</span>',
                esc(f["message"]),
                f'<code class="path">{esc(f["path"])}</code>',
                esc("-" if f["offset"] is None else f["offset"]),
                esc(f["advice"]),
            ]
            for f in doc["findings"]
        ]
        verdict = (
            banner("note", f"ok: {num(doc['commits'])} commits checked, nothing wrong.")
            if doc["ok"] and not rows
            else banner(
                "note" if doc["ok"] else "damage",
                f"{'ok' if doc['ok'] else 'FAILED'}: {num(doc['commits'])} commits checked,"
                f" {num(len(rows))} findings.",
            )
        )
        result = (
            verdict
            + (
                table(
                    ["severity", "finding", "file", "offset", "to address it"],
                    rows,
                    "list findings",
                )
                if rows
                else ""
            )
            + f'<p class="muted">took {esc(doc["seconds"])} s · '
            + a(href(sid_path(sid, "verify"), run=1), "run again")
            + "</p>"
        )
    body = f'<h1 class="sid-title">{esc(sid)}</h1>' + session_tabs(sid, "verify") + intro + result
    return page(f"{sid} verify", body, crumbs=[(sid, sid_path(sid)), ("verify", None)])
