"""The viewer's HTTP server: the standard library's `ThreadingHTTPServer`, answering
GET and HEAD only, to local Host names only, with the pages and the JSON API.

What it refuses, before any route is looked at:
- any method but GET and HEAD (405, `Allow: GET, HEAD`): nothing here changes
  anything, and a page cannot be made to post to it;
- a Host header that is not the address the server is bound to, `localhost` or a
  loopback address, with the server's port (421): a web page whose DNS name is
  re-pointed at 127.0.0.1 (DNS rebinding) sends its own name as Host and is refused.
  So is a request with no Host, with two, or whose target names another host
  (`GET http://evil.example/`). Bound to every address (`0.0.0.0`, `::`), it also
  answers to any IP address as Host: rebinding needs a DNS name, never an address;
- a request another site's page makes without navigating to the viewer (an
  `<img>`, a script, a fetch: `Sec-Fetch-Site` cross-site or same-site, another
  port's page included, and `Sec-Fetch-Mode` not "navigate") (403): such a page
  cannot read the answer, but it could start a verify or time a page. A link
  followed from elsewhere is a navigation and is served;
- a session id that is not one (`journal.validate_session_id`: blank, over 4 KiB):
  400. A valid id, whatever its characters (`../`, NUL, `/`), names a directory by
  its hash (`journal.inspect.session_path`), so it cannot name a path outside the
  store; static files come from a fixed table of names, never from the URL.

Every response says `Content-Security-Policy: default-src 'none'` with only the
viewer's own script, style and API allowed, `X-Content-Type-Options: nosniff` and
`Referrer-Policy: no-referrer`; pages are never framed.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import journal
from journal import CorruptionError, InvalidInputError, JournalError, NotFoundError

from . import history, pages
from .data import Data, error_doc
from .html import banner, esc, page, session_tabs
from .params import Params

STATIC = {
    "viewer.css": "text/css; charset=utf-8",
    "viewer.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
# sent with every response, the library's own refusals (400, 414, 431) included
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
SESSION_TABS = {
    "timeline",
    "conversation",
    "executions",
    "checkpoint",
    "state",
    "tree",
    "verify",
}
API_PARTS = {
    "events",
    "transcript",
    "conversation",
    "executions",
    "checkpoint",
    "state",
    "tree",
    "verify",
    "live",
}


def _status(exc: BaseException) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, InvalidInputError):
        return 400
    if isinstance(exc, CorruptionError):
        return 409
    return 500


class ViewerServer(ThreadingHTTPServer):
    """The viewer of one store; `serve_forever` answers until `shutdown`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, data: Data, host: str = "127.0.0.1", port: int = 0, verbose: bool = False):
        self.data = data
        self.verbose = verbose
        self.stopping = threading.Event()
        if ":" in host:  # an IPv6 address (::1, ::)
            self.address_family = socket.AF_INET6
        super().__init__((host, port), Handler)
        self.port: int = self.server_address[1]
        # bound to every address, it answers to whichever one a client used
        self.any_address = host in ("", "0.0.0.0", "::")
        names = {"localhost", "127.0.0.1", "[::1]"}
        if not self.any_address:
            names.add(f"[{host}]" if ":" in host else host)
        self.hosts = {f"{n}:{self.port}" for n in names}
        if self.port == 80:
            self.hosts |= names

    @property
    def url(self) -> str:
        host = str(self.server_address[0])
        shown = "127.0.0.1" if self.any_address else host
        return f"http://[{shown}]:{self.port}/" if ":" in shown else f"http://{shown}:{self.port}/"

    def shutdown(self) -> None:
        self.stopping.set()  # live tails end
        super().shutdown()


def local_host(value: str | None, allowed: set[str], port: int, any_ip: bool = False) -> bool:
    """Whether a Host header names this server by a local name: one of `allowed`,
    or a loopback address (127.0.0.2, [::1]) with `port`; with `any_ip`, any IP
    address with `port` (an address is never a rebound DNS name)."""
    if not value:
        return False
    value = value.strip().lower()
    if value in allowed:
        return True
    name, sep, given = value.rpartition(":")
    if not sep or given != str(port):
        return False
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    elif ":" in name:  # an IPv6 address without its brackets
        return False
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    return ip.is_loopback or any_ip


class Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    server_version = "journal-viewer"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in two writes: without this, a keep-alive client's
        # delayed ACK holds the second one back some 40 ms (Nagle's algorithm).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # ------------------------------------------------------------- refusals
    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.command not in ("GET", "HEAD"):
            self.close_connection = True  # its body, if any, is never read
            self._send_error(
                405,
                f"{self.command} is not allowed: this viewer only reads",
                {"Allow": "GET, HEAD"},
            )
            return False
        target = urlsplit(self.path) if not self.path.startswith("/") else None
        hosts = self.headers.get_all("Host") or []
        if (
            len(hosts) != 1
            or not local_host(
                hosts[0], self.server.hosts, self.server.port, self.server.any_address
            )
            or (target is not None and target.netloc.lower() != hosts[0].strip().lower())
        ):
            self.close_connection = True
            self._send_error(
                421, f"this server answers only to a local Host name ({self.server.url})"
            )
            return False
        site = (self.headers.get("Sec-Fetch-Site") or "").lower()
        if site in ("cross-site", "same-site") and self.headers.get("Sec-Fetch-Mode") != "navigate":
            self.close_connection = True
            self._send_error(403, "another site's page cannot fetch from this viewer")
            return False
        return True

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    # ------------------------------------------------------------- sending
    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        super().end_headers()

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header(
            "Cache-Control",
            "no-store"
            if not ctype.startswith(("text/css", "text/javascript", "image/"))
            else "max-age=60",
        )
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_error(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        doc: dict[str, Any] | None = None,
    ) -> None:
        if self.path.startswith("/api") or "json" in (self.headers.get("Accept") or ""):
            body = json.dumps(doc or {"error": message, "status": status}, ensure_ascii=False)
            self._send(status, body.encode(), "application/json; charset=utf-8", headers)
            return
        try:
            title = HTTPStatus(status).phrase
        except ValueError:
            title = "error"
        kind = "damage" if status == 409 else "error"
        tabs = ""
        parts = urlsplit(self.path).path.split("/")
        if status == 409 and len(parts) >= 3 and parts[1] == "s":
            title = "Damaged"  # a session's page ran into damage: its other pages may read
            tabs = session_tabs(unquote(parts[2]), "")
        where = ""
        if doc and doc.get("path"):
            where = f' <span class="where">{esc(doc["path"])}'
            where += f" at offset {esc(doc['offset'])}" if doc.get("offset") is not None else ""
            where += "</span>"
        html = page(
            title,
            f"<h1>{esc(status)} {esc(title)}</h1>"
            + tabs
            + banner(kind, esc(message) + where)
            + '<p><a href="/">all sessions</a></p>',
        )
        self._send(status, html.encode(), "text/html; charset=utf-8", headers)

    def _json(self, doc: Any) -> None:
        body = json.dumps(doc, ensure_ascii=False, indent=1).encode()
        self._send(200, body, "application/json; charset=utf-8")

    def _html(self, text: str) -> None:
        self._send(200, text.encode(), "text/html; charset=utf-8")

    # ------------------------------------------------------------- routing
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/")[1:] if p != ""]
        params = Params(parse_qs(url.query, keep_blank_values=False))
        try:
            self._route(parts, params)
        except (JournalError, ValueError) as exc:
            exc = exc if isinstance(exc, JournalError) else InvalidInputError(str(exc))
            self._send_error(_status(exc), str(exc), doc=error_doc(exc))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug: one line on stderr, a 500 to the browser
            sys.stderr.write(f"journal serve: internal error on {self.path!r}: {exc!r}\n")
            self._send_error(500, f"internal error ({type(exc).__name__})")

    def _route(self, parts: list[str], p: Params) -> None:
        data = self.server.data
        if not parts:
            self._html(pages.sessions_page(data, p.sessions()))
        elif parts[0] == "static" and len(parts) == 2 and parts[1] in STATIC:
            body = resources.files(__package__).joinpath("static").joinpath(parts[1]).read_bytes()
            self._send(200, body, STATIC[parts[1]])
        elif parts == ["favicon.ico"]:
            body = (
                resources.files(__package__).joinpath("static").joinpath("favicon.svg").read_bytes()
            )
            self._send(200, body, STATIC["favicon.svg"])
        elif parts[0] == "s" and len(parts) in (2, 3):
            self._session_page(data, _sid(parts[1]), parts[2] if len(parts) == 3 else None, p)
        elif parts == ["diff"]:
            self._html(history.diff_page(data, *p.diff()))
        elif parts == ["api"]:
            self._json(api_index())
        elif parts[0] == "api" and len(parts) >= 2:
            self._api(data, parts[1:], p)
        else:
            raise NotFoundError(f"no page {self.path.split('?')[0]!r}")

    def _session_page(self, data: Data, sid: str, tab: str | None, p: Params) -> None:
        if tab is None:
            self._html(pages.overview_page(data, sid))
        elif tab == "timeline":
            self._html(pages.timeline_page(data, sid, p.seq("before"), p.limit(50), p.types()))
        elif tab == "conversation":
            self._html(
                history.conversation_page(
                    data, sid, p.text("source"), p.seq("before"), p.limit(50), p.seq("at")
                )
            )
        elif tab == "executions":
            self._html(pages.executions_page(data, sid, p.seq("before"), p.limit(50)))
        elif tab == "checkpoint":
            self._html(history.checkpoint_page(data, sid, p.seq("at")))
        elif tab == "state":
            self._html(pages.state_page(data, sid))
        elif tab == "tree":
            self._html(history.tree_page(data, sid))
        elif tab == "verify":
            self._html(history.verify_page(data, sid, p.flag("run")))
        else:
            raise NotFoundError(f"no page {tab!r} of a session")

    def _api(self, data: Data, parts: list[str], p: Params) -> None:
        if parts == ["sessions"]:
            self._json(data.sessions(**p.sessions()))
        elif parts == ["diff"]:
            self._json(data.diff(*p.diff()))
        elif parts[0] == "sessions" and len(parts) == 2:
            self._json(data.show(_sid(parts[1])))
        elif parts[0] == "sessions" and len(parts) == 3 and parts[2] in API_PARTS:
            sid, what = _sid(parts[1]), parts[2]
            if what == "events":
                self._json(
                    data.events(sid, before=p.seq("before"), limit=p.limit(50), types=p.types())
                )
            elif what == "transcript":
                self._json(data.transcript(sid, before=p.seq("before"), limit=p.limit(10)))
            elif what == "conversation":
                self._json(
                    data.conversation(
                        sid,
                        source=p.text("source"),
                        before=p.seq("before"),
                        limit=p.limit(50),
                        at=p.seq("at"),
                    )
                )
            elif what == "executions":
                self._json(data.executions(sid, before=p.seq("before"), limit=p.limit(50)))
            elif what == "checkpoint":
                self._json(data.checkpoint(sid, p.seq("at")))
            elif what == "state":
                self._json(data.state(sid))
            elif what == "tree":
                self._json(data.tree(sid))
            elif what == "verify":
                self._json(data.verify(sid))
            else:
                self._live(data, sid, p)
        else:
            raise NotFoundError(f"no API endpoint {self.path.split('?')[0]!r}")

    # ------------------------------------------------------------- live
    def _live(self, data: Data, sid: str, p: Params) -> None:
        """Server-sent events: `event: events` with a JSON array of new events (oldest
        first), `id:` the last sequence sent (a reconnecting browser sends it back
        as Last-Event-ID and misses nothing); a comment line every 10 s idle."""
        data.summary(sid)
        resume = self.headers.get("Last-Event-ID")
        after = p.seq("after")
        if resume is not None and resume.isdigit():
            after = int(resume)
        if after is None:
            after = data.events(sid, limit=1)["latest_sequence"]
        wanted = set(p.types())
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        self.wfile.write(b"retry: 1000\n\n")
        self.wfile.flush()
        for batch in data.follow(sid, after, stop=self.server.stopping):
            if not batch:
                self.wfile.write(b": idle\n\n")
            else:
                shown = [e for e in batch if not wanted or e["event"]["msg"].get("type") in wanted]
                last = batch[-1]["sequence"]
                text = json.dumps(shown, ensure_ascii=False)
                self.wfile.write(f"id: {last}\nevent: events\ndata: {text}\n\n".encode())
            self.wfile.flush()


def _sid(text: str) -> str:
    """A session id from the URL, checked as the store checks ids."""
    return journal.validate_session_id(text)


def api_index() -> dict[str, Any]:
    """What GET /api answers: every endpoint and its parameters (docs/viewer.md)."""
    s = "/api/sessions/{id}"
    return {
        "endpoints": {
            "/api/sessions": "limit, before (a cursor), owner, q, since, until: newest first",
            s: "a session's summary, counts, sizes, lineage and checkpoint header",
            f"{s}/events": "before, limit, type (repeatable): events newest first",
            f"{s}/transcript": "before, limit: transcript batches newest first",
            f"{s}/conversation": "source (transcript|items|context), before, limit, at",
            f"{s}/executions": "before, limit: execution records newest first",
            f"{s}/checkpoint": "at: the checkpoint exactly as saved (default: the latest)",
            f"{s}/state": "the session's middleware state by key",
            f"{s}/tree": "the fork tree holding the session",
            f"{s}/verify": "verify the session now: findings with file and offset",
            f"{s}/live": "after, type: server-sent events of new commits",
            "/api/diff": "a, at_a, b, at_b: where two checkpoints differ",
        },
        "version": journal.__version__,
    }
