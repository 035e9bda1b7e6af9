"""The viewer without a browser: its JSON API (the same data as `journal ... --json`),
escaping of hostile content, and what the server refuses (foreign Host headers, any
method but GET/HEAD, ids that try to leave the store). The store is built once per
module and must be exactly as it was (every file's size and mtime) at the end."""

from __future__ import annotations

import ast
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from helpers import run_cli, save_items
from test_viewer_fixtures import (
    ESCAPE_ID,
    EVENTS_PER_SAVE,
    MAIN_SAVES,
    build_store,
    serving,
    stop_writer,
    tree_state,
    writer_process,
)

import journal
from journal.viewer.convo import conversation, decode_serialised
from journal.viewer.data import Data
from journal.viewer.server import ViewerServer

PACKAGE = Path(journal.__file__).parent / "viewer"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("viewer-api") / "store"
    build_store(root)
    before = tree_state(root)
    yield root
    assert tree_state(root) == before, "the viewer changed the store"


@pytest.fixture(scope="module")
def server(built: Path) -> Iterator[ViewerServer]:
    with serving(built) as s:
        yield s


def get(
    server: ViewerServer, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def api(server: ViewerServer, path: str) -> Any:
    status, headers, body = get(server, path)
    assert status == 200, (path, status, body[:300])
    assert headers["Content-Type"].startswith("application/json")
    return json.loads(body)


def sid(s: str) -> str:
    return quote(s, safe="")


# ------------------------------------------------------------------ the JSON API
def test_sessions_page_by_page_lists_each_session_once(server: ViewerServer, built: Path) -> None:
    seen: list[str] = []
    before = None
    while True:
        doc = api(server, "/api/sessions?limit=3" + (f"&before={quote(before)}" if before else ""))
        assert len(doc["sessions"]) <= 3
        seen += [s["session_id"] for s in doc["sessions"]]
        before = doc["next_before"]
        if before is None:
            break
    cli = json.loads(run_cli(built, "ls", "--all", "--json", check_code=1).stdout)
    assert seen == [s["session_id"] for s in cli["sessions"]]
    assert len(seen) == len(set(seen)) == 14


def test_a_session_row_is_the_cli_row(server: ViewerServer, built: Path) -> None:
    cli = {
        s["session_id"]: s
        for s in json.loads(run_cli(built, "ls", "--all", "--json", check_code=1).stdout)[
            "sessions"
        ]
    }
    rows = {s["session_id"]: s for s in api(server, "/api/sessions?limit=100")["sessions"]}
    for key, row in rows.items():
        for field in (
            "session_context",
            "sequence",
            "first_user_message",
            "execution_stats",
            "events",
            "log_bytes",
            "damaged",
            "parent_session_id",
        ):
            assert row[field] == cli[key][field], (key, field)
    assert rows["gone"]["damaged"] and rows["gone"]["damage"]["path"]
    assert not rows["main"]["damaged"]


def test_filters_by_owner_search_and_time(server: ViewerServer) -> None:
    bob = api(server, "/api/sessions?owner=bob")["sessions"]
    assert sorted(s["session_id"] for s in bob) == [f"bulk-{i}" for i in range(6)]
    found = api(server, "/api/sessions?q=BULK%20TASK%203")["sessions"]
    assert [s["session_id"] for s in found] == ["bulk-3"]
    by_id = api(server, "/api/sessions?q=fork-2")["sessions"]
    assert [s["session_id"] for s in by_id] == ["main-fork-2"]
    now = int(time.time())
    assert api(server, f"/api/sessions?until={now - 86400 * 365}")["sessions"] == []
    assert api(server, f"/api/sessions?since={now + 86400}")["sessions"] == []
    assert len(api(server, "/api/sessions?since=2000-01-01&limit=100")["sessions"]) == 14
    status, _, body = get(server, "/api/sessions?since=yesterday")
    assert status == 400 and b"since" in body


def test_show_is_the_cli_show_without_a_full_verify(server: ViewerServer, built: Path) -> None:
    doc = api(server, "/api/sessions/main-fork")
    cli = json.loads(run_cli(built, "show", "main-fork", "--json").stdout)
    for key in (
        "summary",
        "events",
        "transcript_batches",
        "executions",
        "ancestors",
        "children",
        "log_bytes",
        "directory",
    ):
        assert doc[key] == cli[key], key
    assert doc["checkpoint_header"] == cli["checkpoint_header"]
    assert doc["ancestors"] == ["main"] and doc["children"] == ["main-fork-2"]


def test_events_newest_first_with_paging_and_types(server: ViewerServer, built: Path) -> None:
    total = MAIN_SAVES * EVENTS_PER_SAVE
    seqs: list[int] = []
    before = None
    while True:
        doc = api(
            server, "/api/sessions/main/events?limit=50" + (f"&before={before}" if before else "")
        )
        seqs += [e["sequence"] for e in doc["events"]]
        before = doc["next_before"]
        if before is None:
            break
    assert seqs == list(range(total, 0, -1))
    cli = json.loads(run_cli(built, "events", "main", "--limit", "7", "--json").stdout)
    assert api(server, "/api/sessions/main/events?limit=7")["events"] == cli
    warn = api(server, "/api/sessions/main/events?type=warning&limit=5")
    assert [e["event"]["msg"]["type"] for e in warn["events"]] == ["warning"] * 5
    both = api(server, "/api/sessions/main/events?type=warning,turn_started&limit=400")
    assert {e["event"]["msg"]["type"] for e in both["events"]} == {"warning", "turn_started"}
    assert both["next_before"] is None and len(both["events"]) == 9 * MAIN_SAVES  # 5 + 4 a save


def test_transcript_checkpoint_diff_tree_verify_match_the_cli(
    server: ViewerServer, built: Path
) -> None:
    assert api(server, "/api/sessions/main/transcript?limit=3") == json.loads(
        run_cli(built, "transcript", "main", "--limit", "3", "--json").stdout
    )
    assert api(server, "/api/sessions/main/checkpoint?at=4") == json.loads(
        run_cli(built, "checkpoint", "main", "--at", "4", "--json").stdout
    )
    doc = api(server, "/api/diff?a=main&at_a=5&b=main-fork")
    cli = json.loads(run_cli(built, "diff", "main", "main-fork", "--json", check_code=1).stdout)
    assert doc["only_b"] == [
        {"role": "user", "content": "retry differently"},
        {"role": "assistant", "content": "other answer"},
    ]
    assert doc["only_a"] == [] and doc["b"] == "main-fork@1"
    assert (
        cli["common_context_items"]
        == api(server, "/api/diff?a=main&b=main-fork")["common_context_items"]
    )
    tree = api(server, "/api/sessions/main-fork-2/tree")["root"]
    cli_tree = json.loads(run_cli(built, "tree", "main", "--json").stdout)[0]

    def shape(n: dict[str, Any]) -> Any:
        return (n["session_id"], n["sequence"], n["forked_at"], [shape(c) for c in n["children"]])

    assert shape(tree) == shape(cli_tree)
    assert tree["children"][0]["forked_at"] == 5
    ok = api(server, "/api/sessions/main/verify")
    assert ok["ok"] and ok["findings"] == [] and ok["commits"] == MAIN_SAVES


def test_verify_names_the_file_and_offset_and_the_list_marks_it(
    server: ViewerServer, built: Path
) -> None:
    rows = {s["session_id"]: s for s in api(server, "/api/sessions?limit=100")["sessions"]}
    assert not rows["flipped"]["damaged"]  # behind the caches until verified
    doc = api(server, "/api/sessions/flipped/verify")
    cli = json.loads(run_cli(built, "verify", "flipped", "--json", check_code=1).stdout)
    assert not doc["ok"] and doc["damaged_sessions"] == ["flipped"]
    assert doc["findings"] == cli["findings"]
    data = [f for f in doc["findings"] if f["severity"] == "data"]
    assert data and data[0]["path"].endswith(".seg") and isinstance(data[0]["offset"], int)
    rows = {s["session_id"]: s for s in api(server, "/api/sessions?limit=100")["sessions"]}
    assert rows["flipped"]["damaged"] and rows["flipped"]["damage"]["offset"] == data[0]["offset"]
    status, _, body = get(server, "/s/flipped/verify?run=1")
    assert status == 200 and data[0]["path"].encode() in body


def test_damage_a_read_runs_into_answers_409_with_file_and_offset(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = journal.open(root)
    for seq in range(6):
        save_items(store, "hurt", seq, seq + 1, events=3)
    directory = Path(store.session_dir("hurt"))
    store.close()
    seg = next((directory / "log").iterdir())
    data = bytearray(seg.read_bytes())
    data[len(data.rstrip(b"\0")) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    for cache in [*directory.glob("*.idx"), directory / "snapshot"]:
        cache.unlink()  # nothing to read past the damage from: the log is read
    with serving(root) as srv:
        status, _, body = get(srv, "/api/sessions/hurt/events")
        doc = json.loads(body)
        assert status == 409 and doc["path"] == str(seg) and isinstance(doc["offset"], int)
        status, _, body = get(srv, "/s/hurt/timeline")
        assert status == 409 and str(seg).encode() in body and b'href="/s/hurt/verify"' in body
        status, _, body = get(srv, "/s/hurt")
        assert status == 200 and b"Damaged" in body and str(seg).encode() in body


def test_conversations_pair_tool_calls_with_their_results(server: ViewerServer) -> None:
    doc = api(server, "/api/sessions/main/conversation?limit=2")
    assert doc["source"] == "transcript" and doc["next_before"] == MAIN_SAVES - 2
    shown = [m for m in doc["messages"] if not m["paired"]]
    assert [m["role"] for m in shown] == ["user", "assistant", "assistant"] * 2
    call = shown[1]["calls"][0]
    assert call["name"] == "shell" and call["result"]["text"] == f"output of ls {MAIN_SAVES - 2}"
    sdk = api(server, "/api/sessions/conv-1/conversation")
    assert sdk["source"] == "items"
    roles = [(m["role"], m["text"]) for m in sdk["messages"] if not m["paired"]]
    assert roles == [
        ("user", "What city is the Golden Gate Bridge in?"),
        ("assistant", ""),
        ("assistant", "San Francisco."),
    ]
    assert sdk["messages"][1]["calls"][0]["result"]["text"] == "San Francisco"


def test_a_langgraph_thread_reads_as_messages(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    from journal.integrations.langgraph import JournalSaver

    def step(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        if n == 1:
            return {
                "messages": [
                    AIMessage(
                        content="", tool_calls=[{"name": "search", "args": {"q": "ci"}, "id": "c1"}]
                    )
                ]
            }
        if n == 2:
            return {"messages": [ToolMessage(content="libssl missing", tool_call_id="c1")]}
        return {"messages": [AIMessage(content="libssl is missing.")]}

    builder = StateGraph(MessagesState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: END if len(s["messages"]) >= 4 else "step")
    root = tmp_path / "lg"
    with JournalSaver(str(root)) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(
            {"messages": [HumanMessage(content="Why is CI red?")]},
            {"configurable": {"thread_id": "t1"}},
        )
    with serving(root) as srv:
        doc = api(srv, "/api/sessions/t1/conversation")
        assert doc["source"] == "context"
        shown = [(m["role"], m["text"]) for m in doc["messages"] if not m["paired"]]
        assert shown == [
            ("user", "Why is CI red?"),
            ("assistant", ""),
            ("assistant", "libssl is missing."),
        ]
        assert doc["messages"][1]["calls"][0]["result"]["text"] == "libssl missing"
        status, _, body = get(srv, "/s/t1/conversation")
        assert status == 200 and b"libssl missing" in body and b"search" in body


def test_item_shapes_become_messages() -> None:
    msgs = conversation(
        [
            ("1", {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
            (
                "2",
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "{}"}}],
                },
            ),
            ("3", {"role": "tool", "tool_call_id": "x", "content": "done"}),
            ("4", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}),
            ("5", ["msgpack", "not base64!"]),
            ("6", 42),
        ]
    )
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "reasoning", "item", "item"]
    assert msgs[1].calls[0].result is msgs[2] and msgs[2].paired
    assert decode_serialised(["json", "eyJhIjogMX0="]) == {"a": 1}


# ------------------------------------------------------------------ escaping
@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/?q=%3Cscript",
        "/s/hostile",
        "/s/hostile/timeline",
        "/s/hostile/conversation",
        "/s/hostile/checkpoint",
        "/s/main/state",
        f"/s/{sid(ESCAPE_ID)}",
        f"/s/{sid(ESCAPE_ID)}/tree",
        "/diff?a=hostile&b=" + sid(ESCAPE_ID),
        "/s/%3Cscript%3Ealert(1)%3C%2Fscript%3E",  # a missing id shown in the error page
    ],
)
def test_hostile_text_is_escaped_everywhere(server: ViewerServer, path: str) -> None:
    status, headers, body = get(server, path)
    assert status in (200, 404), (path, status)
    text = body.decode()
    assert "<script>" not in text.replace('<script src="/static/viewer.js" defer></script>', "")
    assert "<img" not in text and 'onerror="' not in text
    assert "<i>" not in text
    assert re.findall(r"<script\b[^>]*>", text) == ['<script src="/static/viewer.js" defer>']
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    if status == 200 and "hostile" in path and "diff" not in path:
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text


def test_ids_link_as_one_escaped_path_segment(server: ViewerServer) -> None:
    _, _, body = get(server, "/?owner=mallory")
    assert f'href="/s/{sid(ESCAPE_ID)}"' in body.decode()
    doc = api(server, f"/api/sessions/{sid(ESCAPE_ID)}")
    assert doc["summary"]["session_id"] == ESCAPE_ID
    assert Path(doc["directory"]).parent.name == "sessions"


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"])
def test_every_method_but_get_and_head_is_refused(server: ViewerServer, method: str) -> None:
    status, headers, _ = get(server, "/api/sessions", method=method)
    assert status == 405 and headers["Allow"] == "GET, HEAD"


def test_head_answers_headers_only(server: ViewerServer) -> None:
    status, headers, body = get(server, "/s/main", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 1000


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "127.0.0.1.evil.example:{port}",
        "localhost:1",
        "",
        "10.0.0.1:{port}",
    ],
)
def test_foreign_host_headers_are_refused(server: ViewerServer, host: str) -> None:
    status, _, body = get(server, "/api/sessions", headers={"Host": host.format(port=server.port)})
    assert status == 421, (host, status)
    assert b"main" not in body


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "LOCALHOST:{port}"])
def test_local_host_headers_are_served(server: ViewerServer, host: str) -> None:
    status, _, _ = get(server, "/api/sessions", headers={"Host": host.format(port=server.port)})
    assert status == 200


def test_a_request_without_host_is_refused(server: ViewerServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /api/sessions HTTP/1.0\r\n\r\n")
        reply = s.makefile("rb").read()
    assert reply.startswith(b"HTTP/1.0 421") or reply.startswith(b"HTTP/1.1 421"), reply[:40]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/s/..%2F..%2F..%2Fetc%2Fpasswd", 404),
        ("/s/../../etc/passwd", 404),
        ("/api/sessions/..%2F..%2FJOURNAL", 404),
        ("/api/sessions/%00", 404),
        ("/api/sessions/main%00", 404),
        ("/api/sessions/" + "a" * 4096, 404),
        ("/api/sessions/" + "a" * 4097, 400),
        ("/api/sessions/%20", 400),
        ("/static/..%2Fserver.py", 404),
        ("/static/../server.py", 404),
        ("/static/viewer.css/../../data.py", 404),
        ("/api/sessions/main/checkpoint?at=-1", 400),
        ("/api/sessions/main/events?before=x", 400),
        ("/api/sessions/main/nothing", 404),
        ("/api/sessions?before=not-a-cursor", 400),
    ],
)
def test_ids_and_paths_never_leave_the_store(server: ViewerServer, path: str, status: int) -> None:
    got, _headers, body = get(server, path)
    assert got == status, (path, got, body[:200])
    assert b"root:" not in body and b"import " not in body
    if path.startswith("/api"):
        assert json.loads(body)["error"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/sessions?since=99999999999999999999",
        "/api/sessions?until=99999999999999999999",
        "/?since=99999999999999999999",
        "/?until=99999999999999999",
        "/?since=10000-01-01",
        "/api/sessions/main/events?limit=%EF%BC%95",  # a fullwidth 5
        "/api/sessions/main/events?limit=%C2%B2",  # a superscript 2
        "/s/main/checkpoint?at=%D9%A5",  # an Arabic-Indic 5
    ],
)
def test_absurd_times_and_numbers_are_400s(server: ViewerServer, path: str) -> None:
    got, _, body = get(server, path)
    assert got == 400, (path, got, body[:200])
    if path.startswith("/api"):
        assert "is not a sequence number" in json.loads(body)["error"] or "years" in str(body)


@pytest.mark.parametrize(
    "path",
    [
        "/api/sessions?until=9999-12-31",
        "/?until=9999-12-31",
        "/?until=0001-01-01T00:00:00",  # the form shows the day before an end
    ],
)
def test_the_first_and_last_days_dates_name_are_ends(server: ViewerServer, path: str) -> None:
    got, _, body = get(server, path)
    assert got == 200, (path, got, body[:200])


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return s.makefile("rb").read()


def test_two_host_headers_or_a_foreign_target_are_refused(server: ViewerServer) -> None:
    me, evil = f"127.0.0.1:{server.port}", "evil.example"
    for first, second in ((me, evil), (evil, me), (me, me)):
        reply = _raw(
            server.port,
            f"GET /api/sessions HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\n"
            "Connection: close\r\n\r\n".encode(),
        )
        assert reply.startswith(b"HTTP/1.1 421"), (first, second, reply[:40])
    for target, status in ((f"http://{evil}/api/sessions", b"421"), (f"http://{me}/api", b"200")):
        reply = _raw(
            server.port,
            f"GET {target} HTTP/1.1\r\nHost: {me}\r\nConnection: close\r\n\r\n".encode(),
        )
        assert reply.startswith(b"HTTP/1.1 " + status), (target, reply[:40])


def test_bound_to_every_address_it_answers_to_addresses_not_names(built: Path) -> None:
    data = Data(str(built))
    server = ViewerServer(data, "0.0.0.0", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        for host, status in (
            ("10.0.0.1:{port}", 200),
            ("[fd00::1]:{port}", 200),
            ("127.0.0.1:{port}", 200),
            ("evil.example:{port}", 421),
            ("10.0.0.1.evil.example:{port}", 421),
            ("10.0.0.1:1", 421),
        ):
            got, _, _ = get(server, "/api", headers={"Host": host.format(port=server.port)})
            assert got == status, (host, got)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        data.close()


def test_it_serves_on_ipv6_loopback(built: Path) -> None:
    data = Data(str(built))
    server = ViewerServer(data, "::1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        assert server.url == f"http://[::1]:{server.port}/"
        conn = http.client.HTTPConnection("::1", server.port, timeout=30)
        conn.request("GET", "/api/sessions?owner=bob")
        resp = conn.getresponse()
        assert resp.status == 200 and len(json.loads(resp.read())["sessions"]) == 6
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        data.close()


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error(built: Path, port: str) -> None:
    proc = run_cli(built, "serve", "--port", port, check_code=2)
    assert "is not a TCP port" in proc.stderr


def test_a_long_chain_of_forks_is_drawn_in_part(tmp_path: Path) -> None:
    """Forks of forks 520 deep: the nested tree would exceed Python's recursion
    limit, in the JSON encoder and the page alike; a window of it is drawn."""
    root = tmp_path / "chain"
    store = journal.open(root, durability="os")
    try:
        store.save(journal.Checkpoint.empty("c0", owner_id="o"))
        for i in range(1, 520):
            store.fork_at(f"c{i - 1}", 0, f"c{i}")
    finally:
        store.close()
    with serving(root) as s:
        for at in ("c0", "c300", "c519"):
            doc = api(s, f"/api/sessions/{at}/tree")
            chain, n = [], doc["root"]
            while True:
                chain.append(n["session_id"])
                if not n["children"]:
                    break
                n = n["children"][0]
            assert at in chain and doc["truncated"] and doc["nodes"] == len(chain) <= 201
            status, _, body = get(s, f"/s/{at}/tree")
            assert status == 200 and b"sessions are drawn" in body, (at, status)


def test_every_response_carries_the_security_headers(server: ViewerServer) -> None:
    """The library's own refusals (a request line too long, too many headers) and
    the live stream too, not only the pages and the API."""
    replies = [
        _raw(server.port, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"),
        _raw(server.port, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"),
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        host = f"127.0.0.1:{server.port}"
        sock.sendall(f"GET /api/sessions/main/live HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
    replies.append(head)
    for reply in replies:
        head = reply.split(b"\r\n\r\n")[0].decode()
        assert "Content-Security-Policy: default-src 'none'" in head, head
        assert head.count("X-Content-Type-Options: nosniff") == 1, head
        assert "X-Frame-Options: DENY" in head, head


@pytest.mark.parametrize(
    ("site", "mode", "status"),
    [
        ("cross-site", "no-cors", 403),  # <img src=...> on another site's page
        ("cross-site", "cors", 403),  # fetch()
        ("same-site", "no-cors", 403),  # a page on another port of this machine
        ("cross-site", "navigate", 200),  # a link followed from elsewhere
        ("same-origin", "cors", 200),  # the viewer's own script
        ("none", "navigate", 200),  # a URL typed in
    ],
)
def test_other_sites_pages_cannot_fetch(
    server: ViewerServer, site: str, mode: str, status: int
) -> None:
    got, _, _ = get(
        server,
        "/s/main/verify?run=1",
        headers={"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode},
    )
    assert got == status, (site, mode, got)


def test_the_static_files_are_served(server: ViewerServer) -> None:
    for name, ctype in (("viewer.css", "text/css"), ("viewer.js", "text/javascript")):
        status, headers, body = get(server, f"/static/{name}")
        assert status == 200 and headers["Content-Type"].startswith(ctype) and len(body) > 1000


# ------------------------------------------------------------------ live
def test_the_live_stream_carries_another_process_commits(tmp_path: Path) -> None:
    root = tmp_path / "live"  # its own store: the module's store must stay unchanged
    store = journal.open(root)
    store.save(journal.Checkpoint.empty("tail"))
    store.close()
    with serving(root) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.request("GET", "/api/sessions/tail/live?after=0")
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        writer = writer_process(root, "tail", 8)
        try:
            got: list[str] = []
            last_id = None
            while len(got) < 8:
                line = resp.fp.readline().decode()
                assert line, "the stream ended"
                if line.startswith("id: "):
                    last_id = int(line[4:])
                if line.startswith("data: "):
                    got += [e["event"]["msg"]["message"] for e in json.loads(line[6:])]
            assert got == [f"live-{i}" for i in range(8)] and last_id == 8
        finally:
            conn.close()
            stop_writer(writer)


# ------------------------------------------------------------------ the command
def test_the_command_serves_until_interrupted(built: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "journal.viewer", "--root", str(built), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:") and "read-only" in line, line
        port = int(line.split("127.0.0.1:")[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/api/sessions?owner=bob")
        assert len(json.loads(conn.getresponse().read())["sessions"]) == 6
        conn.close()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        assert proc.returncode == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_command_refuses_a_missing_store(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "journal.viewer", "--root", str(tmp_path / "none"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "no journal store" in proc.stderr and not proc.stdout


# ------------------------------------------------------------------ the code
def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.add(node.module)
            elif node.level == 1:
                found.add("journal.viewer" + (f".{node.module}" if node.module else ""))
            else:
                found.add("journal" + (f".{node.module}" if node.module else ""))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_the_viewer_uses_only_the_public_api_and_the_tools_interface() -> None:
    for path in PACKAGE.glob("*.py"):
        inside = {m for m in _imports(path) if m.split(".")[0] == "journal"}
        strays = {
            m
            for m in inside
            if m not in ("journal", "journal.inspect") and not m.startswith("journal.viewer")
        }
        assert not strays, f"{path.name} imports {sorted(strays)}"
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"\b([A-Za-z_]\w*)\.(_[a-z]\w*)\b", line.split("#")[0]):
                assert m.group(1) in ("self", "cls", "os", "sys"), f"{path.name}:{n}: {m.group(0)}"


def test_the_viewer_needs_only_the_standard_library() -> None:
    allowed = {"journal", "msgspec"} | set(sys.stdlib_module_names)
    for path in PACKAGE.glob("*.py"):
        for m in _imports(path):
            assert m.split(".")[0] in allowed, f"{path.name} imports {m}"
