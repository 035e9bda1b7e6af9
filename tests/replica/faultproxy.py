"""A TCP proxy between S3 clients and a real S3 server, with faults switched on demand.

    proxy = FaultProxy("127.0.0.1", server_port)
    proxy.start()                       # listens on 127.0.0.1:<proxy.port>
    target = dataclasses.replace(target, endpoint_url=proxy.url)
    proxy.set_mode(DROP)                # new connections: accepted and closed at once
    proxy.set_mode(PASS, delay_ms=200)  # every forwarded chunk waits 200 ms
    proxy.stop()

Modes (they apply to what happens from the switch on; `RESET` also cuts what is open):

- PASS: forward both ways (optionally delayed by N ms per read, per direction).
- DROP: accept each new connection and close it at once with a reset; established
  (pooled, keep-alive) connections keep working. Use RESET first to cut those too.
- RESET: reset every established connection now, and new ones as DROP does.
- BLACKHOLE: accept new connections and never answer; what arrives on established
  ones is swallowed. The client waits for its read timeout.

`requests` counts the HTTP requests forwarded to the server (request lines seen in
PASS mode), `connections` the connections accepted in any mode. Threads: one
acceptor, two pumps per forwarded connection. Switching back to PASS releases the
black-holed connections (reset).
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
import time

PASS = "pass"
DROP = "drop"
RESET = "reset"
BLACKHOLE = "blackhole"
MODES = (PASS, DROP, RESET, BLACKHOLE)

# A request line; not anchored: after a request with a body the next one follows the
# body's last byte directly. (A body holding such a line would be counted too.)
_REQUEST_LINE = re.compile(
    rb"(?:GET|PUT|POST|HEAD|DELETE|OPTIONS|PATCH) /[^\r\n ]* HTTP/1\.[01]\r\n"
)
_BUF = 65536


class FaultProxy:
    """A loopback TCP proxy to `(upstream_host, upstream_port)` with switchable faults."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.mode = PASS
        self.delay_up_ms = 0  # client -> server
        self.delay_down_ms = 0  # server -> client
        self.requests = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._held: list[socket.socket] = []  # black-holed connections, kept open
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._stopping = threading.Event()
        self.port = 0

    # -- control ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.settimeout(0.2)  # lets the acceptor see stop()
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="faultproxy-accept", daemon=True
        )
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            doomed = list(self._open) + self._held
            self._open.clear()
            self._held.clear()
        for sock in doomed:
            _close(sock)

    def set_mode(
        self,
        mode: str,
        *,
        delay_ms: int | None = None,
        delay_up_ms: int | None = None,
        delay_down_ms: int | None = None,
    ) -> None:
        """Switch to `mode`; `delay_ms` sets both directions' delay (or each one alone)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if delay_ms is not None:
            self.delay_up_ms = self.delay_down_ms = delay_ms
        if delay_up_ms is not None:
            self.delay_up_ms = delay_up_ms
        if delay_down_ms is not None:
            self.delay_down_ms = delay_down_ms
        with self._lock:
            self.mode = mode
            doomed = list(self._open) if mode == RESET else []
            if mode != BLACKHOLE:
                doomed += self._held
                self._held.clear()
            if mode == RESET:
                self._open.clear()
        for sock in doomed:
            _reset(sock)

    def reset_counters(self) -> None:
        with self._lock:
            self.requests = 0
            self.connections = 0

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inside ------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                mode = self.mode
            if mode in (DROP, RESET):
                _reset(client)
                continue
            if mode == BLACKHOLE:
                with self._lock:
                    self._held.append(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open.update((client, server))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        tail = b""  # the end of the previous chunk: a request line may straddle two reads
        try:
            while True:
                data = src.recv(_BUF)
                if not data:
                    break
                if upstream and self.mode == PASS:
                    seen = len(_REQUEST_LINE.findall(tail + data)) - len(
                        _REQUEST_LINE.findall(tail)
                    )
                    tail = (tail + data)[-512:]
                    with self._lock:
                        self.requests += seen
                delay = self.delay_up_ms if upstream else self.delay_down_ms
                if delay:
                    time.sleep(delay / 1000)
                mode = self.mode
                if mode == RESET:
                    break
                if mode == BLACKHOLE:
                    continue  # swallowed: the other side waits for its timeout
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            _close(src)
            _close(dst)


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0) instead of a clean FIN. shutdown(SHUT_RD) first wakes
    a pump blocked in recv on it (a bare close does not), without sending anything."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
