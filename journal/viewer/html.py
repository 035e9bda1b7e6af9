"""HTML building blocks of the viewer's pages: escaping, links, the page frame,
tables, raw-JSON toggles, times and sizes.

Every piece of stored content reaches a page through `esc` (or `raw_json`, which
escapes too): text from a session is never markup. Links to a session put its id
in one path segment, percent-encoded with nothing left safe (`sid_path`). The pages
load no inline script or style, so the Content-Security-Policy the server sends
(`script-src 'self'`) would stop a script even if one got into the markup.
"""

from __future__ import annotations

import datetime
import html
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlencode

MAX_TEXT = 20_000  # characters of one message shown before "show all" (raw JSON has all)


def esc(value: object) -> str:
    """Text as HTML text or attribute value (quotes escaped too)."""
    return html.escape("" if value is None else str(value), quote=True)


def sid_path(sid: str, *rest: str) -> str:
    """The page path of a session (`/s/<id>/...`), the id percent-encoded."""
    return "/s/" + "/".join([quote(sid, safe=""), *rest])


def href(path: str, **query: object) -> str:
    """`path?query` with the None values left out (not yet escaped for HTML)."""
    q = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(q, doseq=True) if q else "")


def a(url: str, text: object, cls: str = "", **attrs: str) -> str:
    extra = "".join(f' {esc(k.replace("_", "-"))}="{esc(v)}"' for k, v in attrs.items())
    c = f' class="{esc(cls)}"' if cls else ""
    return f'<a href="{esc(url)}"{c}{extra}>{esc(text)}</a>'


def when(seconds: float | None) -> str:
    """Unix seconds as a UTC date and time; one no date can name, as the number."""
    if seconds is None:
        return "-"
    try:
        at = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(seconds)
    return at.strftime("%Y-%m-%d %H:%M:%S")


def when_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        at = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def num(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def raw_json(value: Any, label: str = "raw JSON") -> str:
    """A collapsed block with the value as indented JSON, one click away."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return (
        f'<details class="raw"><summary>{esc(label)}</summary>'
        f'<pre class="json">{esc(text)}</pre></details>'
    )


def long_text(text: str) -> str:
    """A message's text, preformatted; very long text is cut (the raw JSON has all)."""
    if len(text) <= MAX_TEXT:
        return f'<div class="text">{esc(text)}</div>'
    return (
        f'<div class="text">{esc(text[:MAX_TEXT])}</div>'
        f'<p class="muted">… {len(text) - MAX_TEXT:,} more characters in the raw JSON</p>'
    )


def table(headers: list[str], rows: Iterable[list[str]], cls: str = "", attrs: str = "") -> str:
    """A table; the cells are markup already (escape what goes in)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    c = f' class="{esc(cls)}"' if cls else ""
    return (
        f'<div class="scroll"><table{c}{attrs}><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def dl(pairs: list[tuple[str, str]]) -> str:
    """A definition list; the values are markup already."""
    return (
        '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"
    )


def banner(kind: str, text: str) -> str:
    """A notice: kind is "damage", "note" or "error"; `text` is markup already."""
    return f'<div class="banner {esc(kind)}" role="alert">{text}</div>'


def damage_banner(doc: dict[str, Any] | None) -> str:
    if not doc:
        return ""
    where = ""
    if doc.get("path"):
        where = f' <span class="where">{esc(doc["path"])}'
        if doc.get("offset") is not None:
            where += f" at offset {esc(doc['offset'])}"
        where += "</span>"
    return banner("damage", f"<strong>Damaged:</strong> {esc(doc.get('error'))}{where}")


def page(title: str, body: str, *, crumbs: list[tuple[str, str | None]] | None = None) -> str:
    """A whole page: the header with its breadcrumbs, the body, the stylesheet and
    script (both from /static/, nothing inline)."""
    trail = [a("/", "journal")]
    for text, url in crumbs or []:
        trail.append(a(url, text) if url else f'<span aria-current="page">{esc(text)}</span>')
    nav = ' <span class="sep">/</span> '.join(trail)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>{esc(title)} · journal</title>"
        '<link rel="stylesheet" href="/static/viewer.css">'
        '<script src="/static/viewer.js" defer></script>'
        "</head><body>"
        f'<header class="top"><nav class="crumbs">{nav}</nav>'
        '<span class="ro" title="opened read-only: no lock, no write">read-only</span>'
        '<a class="keys" href="#help" data-help>keys</a></header>'
        f'<main id="main">{body}</main>'
        '<footer class="foot">'
        '<a href="/api">JSON API</a> · <kbd>j</kbd>/<kbd>k</kbd> move · <kbd>Enter</kbd> open'
        " · <kbd>n</kbd>/<kbd>p</kbd> page · <kbd>/</kbd> filter · <kbd>?</kbd> keys"
        "</footer></body></html>\n"
    )


def pager(older: str | None, newest: str | None) -> str:
    """Paging links: to the newest page and to the next older one."""
    parts = []
    if newest:
        parts.append(a(newest, "⇤ newest", "btn", data_page="first"))
    if older:
        parts.append(a(older, "older →", "btn", rel="next", data_page="next"))
    return f'<nav class="pager">{"".join(parts)}</nav>' if parts else ""


def session_tabs(sid: str, current: str) -> str:
    tabs = [
        ("overview", sid_path(sid)),
        ("timeline", sid_path(sid, "timeline")),
        ("conversation", sid_path(sid, "conversation")),
        ("executions", sid_path(sid, "executions")),
        ("checkpoints", sid_path(sid, "checkpoint")),
        ("state", sid_path(sid, "state")),
        ("forks", sid_path(sid, "tree")),
        ("verify", sid_path(sid, "verify")),
    ]
    links = "".join(
        a(url, name, "tab current" if name == current else "tab", aria_current="page")
        if name == current
        else a(url, name, "tab")
        for name, url in tabs
    )
    return f'<nav class="tabs">{links}</nav>'
