"""The viewer's pages of the store and of one session's journals: the sessions list,
a session's overview, its timeline of events, its execution records and its
middleware state. (Conversation, checkpoints, diffs, forks and verify: `history.py`.)

Each page function takes the store's `Data` and the request's parameters and
returns the page's HTML; every value from the store goes through `html.esc`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from journal import JournalError

from .data import Data, error_doc
from .html import (
    a,
    damage_banner,
    dl,
    esc,
    href,
    num,
    page,
    pager,
    raw_json,
    session_tabs,
    sid_path,
    size,
    table,
    when,
    when_ms,
)


def _sid_link(sid: str, cls: str = "sid") -> str:
    return a(sid_path(sid), sid, cls, title=sid)  # the title: the whole of a long id


def _clip(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------ sessions
def sessions_page(data: Data, params: dict[str, Any]) -> str:
    doc = data.sessions(**params)
    form = (
        '<form class="filters" method="get" action="/" role="search">'
        f'<input type="search" name="q" value="{esc(params.get("q") or "")}"'
        ' placeholder="search id or first message" aria-label="search" data-filter>'
        f'<input name="owner" value="{esc(params.get("owner") or "")}" placeholder="owner"'
        ' aria-label="owner">'
        f'<label>since <input type="date" name="since" value="{esc(_day(params.get("since")))}">'
        "</label>"
        f'<label>until <input type="date" name="until" value="{esc(_day(params.get("until"), 1))}">'
        "</label>"
        '<button type="submit">filter</button> <a href="/" class="btn">clear</a></form>'
    )
    rows = []
    for s in doc["sessions"]:
        ctx = s["session_context"]
        stats = s["execution_stats"]
        parent = "-"
        if s["parent_session_id"] is not None:
            parent = f"{_sid_link(s['parent_session_id'])} @{esc(s['parent_sequence'])}"
        mark = ""
        if s["damaged"]:
            mark = f' <span class="badge bad" title="{esc(s["damage"]["error"])}">damaged</span>'
        origin = ctx.get("origin_label")
        rows.append(
            [
                f'<span class="nowrap">{esc(when(s["updated_at"]))}</span>',
                _sid_link(s["session_id"]) + mark,
                esc(ctx["owner_id"])
                + (f' <span class="badge">{esc(origin)}</span>' if origin else ""),
                parent,
                esc(s["sequence"]),
                num(s["events"]),
                f'<span title="files {esc(size(s["file_bytes"]))}, on disk'
                f' {esc(size(s["disk_bytes"]))}">{esc(size(s["log_bytes"]))}</span>',
                f"{num(stats['run_count'])} · {num(stats['usage']['total_tokens'])} tok",
                f'<span class="msg">{esc(_clip(s["first_user_message"] or ""))}</span>',
            ]
        )
    older = None
    if doc["next_before"]:
        older = href("/", **{**_filters(params), "before": doc["next_before"]})
    newest = href("/", **_filters(params)) if params.get("before") else None
    note = ""
    if params.get("q"):
        note = (
            f'<p class="muted">{num(len(doc["sessions"]))} found among'
            f" {num(doc['scanned'])} sessions looked at"
            + (" — older ones: next page" if doc["next_before"] else "")
            + "</p>"
        )
    body = (
        "<h1>Sessions</h1>"
        + form
        + note
        + (
            table(
                [
                    "updated",
                    "session",
                    "owner",
                    "parent",
                    "seq",
                    "events",
                    "log",
                    "runs",
                    "first user message",
                ],
                rows,
                "list nav-rows",
            )
            if rows
            else '<p class="empty">No sessions match.</p>'
        )
        + pager(older, newest)
    )
    return page("Sessions", body)


def _filters(params: dict[str, Any]) -> dict[str, Any]:
    return {k: params.get(k) for k in ("q", "owner", "since", "until", "limit")}


def _day(seconds: int | None, back: int = 0) -> str:
    """A date for a date field (`back`: seconds before, for an exclusive end)."""
    return when(seconds - back)[:10] if seconds is not None else ""


# ------------------------------------------------------------------ overview
def _cost(header: dict[str, Any] | None) -> str | None:
    meta = (header or {}).get("metadata") or {}
    for key in ("cost_usd", "cost", "total_cost_usd"):
        v = meta.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return f"${v:,.4f}" if "usd" in key else f"{v:,}"
    return None


def overview_page(data: Data, sid: str) -> str:
    info = data.show(sid)
    s = info["summary"]
    header = info["checkpoint_header"]
    ctx = s["session_context"]
    stats = s["execution_stats"]
    usage = (header or {}).get("total_usage") or stats["usage"]
    facts: list[tuple[str, str]] = [
        ("owner", esc(ctx["owner_id"])),
    ]
    for k in ("tenant_id", "user_name", "workspace_label", "origin_label"):
        if ctx.get(k):
            facts.append((k.replace("_", " "), esc(ctx[k])))
    facts += [
        ("sequence", f"{esc(s['sequence'])} · epoch {esc(info['context_epoch'])}"),
        ("created", esc(when(s["created_at"]))),
        ("updated", esc(when(s["updated_at"]))),
        (
            "journals",
            f"{num(info['events'])} events · {num(info['transcript_batches'])} transcript batches"
            f" · {num(info['executions'])} executions",
        ),
        (
            "usage",
            f"{num(usage['input_tokens'])} in · {num(usage['output_tokens'])} out ·"
            f" {num(usage['total_tokens'])} total tokens",
        ),
        (
            "runs",
            f"{num(stats['run_count'])} ({num(stats['failed_run_count'])} failed,"
            f" {num(stats['aborted_run_count'])} aborted) · {num(stats['tool_calls'])} tool calls"
            f" · {num(stats['elapsed_ms'])} ms",
        ),
    ]
    cost = _cost(header)
    if cost:
        facts.append(("cost", esc(cost)))
    if header and header.get("model_route"):
        facts.append(("model route", esc(header["model_route"])))
    if s["parent_session_id"] is not None:
        p, at = s["parent_session_id"], s["parent_sequence"]
        diff = href("/diff", a=p, at_a=at, b=sid)
        facts.append(
            (
                "parent",
                f"{_sid_link(p)} forked at {esc(at)} · "
                + a(diff, "diff with the parent at the fork point"),
            )
        )
    if info["children"]:
        facts.append(("forks", " ".join(_sid_link(c) for c in info["children"])))
    facts += [
        (
            "size",
            f"log {esc(size(info['log_bytes']))} · files {esc(size(info['file_bytes']))} ·"
            f" on disk {esc(size(info['disk_bytes']))}",
        ),
        ("directory", f"<code>{esc(info['directory'])}</code>"),
        ("first message", esc(s["first_user_message"] or "-")),
    ]
    if header:
        busy = [
            k
            for k in ("active_execution", "active_model_step", "pending_approval")
            if header.get(k)
        ]
        busy += [k for k in ("pending_messages", "pending_tools") if header.get(k)]
        if busy:
            facts.append(("in flight", esc(", ".join(busy))))
    recent = ""
    if info["damage"] is None:
        try:
            ev = data.events(sid, limit=8)
            recent = (
                "<h2>Latest events</h2>"
                + _event_table(sid, ev["events"])
                + f"<p>{a(sid_path(sid, 'timeline'), 'the whole timeline →')}</p>"
            )
            ex = data.executions(sid, limit=5)
            if ex["executions"]:
                recent += (
                    "<h2>Latest turns</h2>"
                    + _exec_table(ex["executions"])
                    + f"<p>{a(sid_path(sid, 'executions'), 'every execution record →')}</p>"
                )
        except JournalError as exc:  # damage beyond the caches shows where it is
            recent = damage_banner(error_doc(exc))
    body = (
        f'<h1 class="sid-title">{esc(sid)}</h1>'
        + session_tabs(sid, "overview")
        + damage_banner(info["damage"])
        + dl(facts)
        + (raw_json(header, "checkpoint header (raw JSON)") if header else "")
        + recent
    )
    return page(sid, body, crumbs=[(sid, None)])


# ------------------------------------------------------------------ timeline
def _detail(msg: dict[str, Any]) -> str:
    rest = {k: v for k, v in msg.items() if k not in ("type", "session_id")}
    for key in ("text", "delta", "message"):
        if isinstance(rest.get(key), str):
            return str(rest[key])
    if msg.get("type") == "agents.items" and isinstance(rest.get("items"), list):
        return f"{len(rest['items'])} items: " + json.dumps(rest["items"], ensure_ascii=False)
    return json.dumps(rest, ensure_ascii=False)


def _event_row(e: dict[str, Any]) -> str:
    msg = e["event"]["msg"]
    kind = str(msg.get("type", "?"))
    return (
        f'<tr class="ev" tabindex="0" data-seq="{esc(e["sequence"])}">'
        f'<td class="num">{esc(e["sequence"])}</td>'
        f'<td class="nowrap">{esc(when_ms(e["recorded_at_ms"]))}</td>'
        f'<td><span class="type">{esc(kind)}</span></td>'
        f'<td class="detail"><span class="msg">{esc(_clip(_detail(msg), 200))}</span>'
        f"{raw_json(e)}</td></tr>"
    )


def _event_table(sid: str, events: list[dict[str, Any]], live: str = "") -> str:
    rows = "".join(_event_row(e) for e in events)
    return (
        f'<div class="scroll"><table class="list timeline nav-rows"{live}><thead><tr>'
        "<th>seq</th><th>recorded</th><th>type</th><th>detail</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def timeline_page(data: Data, sid: str, before: int | None, limit: int, types: list[str]) -> str:
    doc = data.events(sid, before=before, limit=limit, types=types)
    seen = sorted({str(e["event"]["msg"].get("type", "?")) for e in doc["events"]} | set(types))
    chips = []
    for t in seen:
        on = t in types
        chosen = sorted(set(types) - {t}) if on else sorted({*types, t})
        url = href(sid_path(sid, "timeline"), type=chosen, limit=limit if limit != 50 else None)
        chips.append(a(url, t, "chip on" if on else "chip", aria_pressed="true" if on else "false"))
    form = (
        f'<form class="filters" method="get" action="{esc(sid_path(sid, "timeline"))}">'
        f'<input name="type" value="{esc(" ".join(types))}" placeholder="event types, e.g. warning'
        ' turn_started" aria-label="event types" data-filter>'
        '<button type="submit">filter</button>'
        f" {a(sid_path(sid, 'timeline'), 'all types', 'btn')}</form>"
        f'<div class="chips" aria-label="types on this page">{"".join(chips)}</div>'
    )
    live = ""
    if before is None:
        url = href(
            f"/api/sessions/{_q(sid)}/live", after=doc["latest_sequence"], type=types or None
        )
        live = f' data-live="{esc(url)}"'
    older = None
    if doc["next_before"] is not None:
        older = href(
            sid_path(sid, "timeline"),
            before=doc["next_before"],
            type=types or None,
            limit=limit if limit != 50 else None,
        )
    newest = href(sid_path(sid, "timeline"), type=types or None) if before is not None else None
    note = ""
    if types:
        note = (
            f'<p class="muted">{num(len(doc["events"]))} matching among {num(doc["scanned"])}'
            " events looked at</p>"
        )
    follow = ""
    if live:
        follow = (
            '<p class="live-bar"><button type="button" data-follow aria-pressed="false">'
            'Follow live</button> <span class="live-status" aria-live="polite"></span></p>'
        )
    body = (
        f'<h1 class="sid-title">{esc(sid)}</h1>'
        + session_tabs(sid, "timeline")
        + f'<p class="muted">{num(doc["latest_sequence"])} events, newest first.</p>'
        + form
        + follow
        + note
        + (
            _event_table(sid, doc["events"], live)
            if doc["events"] or live
            else '<p class="empty">No events here.</p>'
        )
        + pager(older, newest)
    )
    return page(f"{sid} timeline", body, crumbs=[(sid, sid_path(sid)), ("timeline", None)])


def _q(sid: str) -> str:
    return quote(sid, safe="")


# ---------------------------------------------------------------- executions
def _exec_table(records: list[dict[str, Any]]) -> str:
    longest = max([r["elapsed_ms"] for r in records] + [1])
    rows = []
    for r in records:
        width = max(1, round(100 * r["elapsed_ms"] / longest))
        u = r["usage"]
        rows.append(
            [
                f'<span class="nowrap">{esc(when_ms(r["started_at_ms"]))}</span>',
                esc(r["turn_id"]),
                f'<span class="outcome {esc(r["outcome"])}">{esc(r["outcome"])}</span>',
                f'<span class="bar" data-w="{width}"><span class="fill w{width // 5 * 5}">'
                f'</span></span> <span class="num">{num(r["elapsed_ms"])}</span>',
                num(r["model_calls"]),
                f"{num(r['tool_calls'])}"
                + (
                    f' <span class="bad">({num(r["failed_tool_calls"])} failed)</span>'
                    if r["failed_tool_calls"]
                    else ""
                ),
                f"{num(u['input_tokens'])} / {num(u['output_tokens'])}",
                num(u["total_tokens"]),
                raw_json(r),
            ]
        )
    return table(
        [
            "started",
            "turn",
            "outcome",
            "duration ms",
            "model calls",
            "tool calls",
            "tokens in/out",
            "tokens",
            "",
        ],
        rows,
        "list execs nav-rows",
    )


def executions_page(data: Data, sid: str, before: int | None, limit: int) -> str:
    doc = data.executions(sid, before=before, limit=limit)
    older = None
    if doc["next_before"] is not None:
        older = href(sid_path(sid, "executions"), before=doc["next_before"])
    newest = sid_path(sid, "executions") if before is not None else None
    body = (
        f'<h1 class="sid-title">{esc(sid)}</h1>'
        + session_tabs(sid, "executions")
        + (
            _exec_table(doc["executions"])
            if doc["executions"]
            else '<p class="empty">No execution records.</p>'
        )
        + pager(older, newest)
    )
    return page(f"{sid} executions", body, crumbs=[(sid, sid_path(sid)), ("executions", None)])


# --------------------------------------------------------------------- state
def state_page(data: Data, sid: str) -> str:
    items = data.state(sid)
    rows = [
        [
            f"<code>{esc(k)}</code>",
            f'<pre class="json">{esc(json.dumps(v, indent=2, ensure_ascii=False))}</pre>',
        ]
        for k, v in items.items()
    ]
    body = (
        f'<h1 class="sid-title">{esc(sid)}</h1>'
        + session_tabs(sid, "state")
        + '<p class="muted">Middleware state of this session (scope = the session id),'
        " one value per key.</p>"
        + (table(["key", "value"], rows, "list") if rows else '<p class="empty">No state.</p>')
    )
    return page(f"{sid} state", body, crumbs=[(sid, sid_path(sid)), ("state", None)])
