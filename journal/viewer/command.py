"""`journal serve`: the viewer's command, its parser and `python -m journal.viewer`.

`add_parsers(add)` registers `serve` with the `journal` command line the way the
`cli_*` modules register theirs; `main` runs the same command on its own. The
server's modules (and the rest) are imported only when `serve` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from journal import JournalError

DEFAULT_PORT = 8765
EXIT_OK, EXIT_FINDINGS, EXIT_INTERRUPTED = 0, 1, 130

Add = Callable[[str, Callable[[argparse.Namespace, Any], int], str], argparse.ArgumentParser | None]


def cmd_serve(args: argparse.Namespace, out: Any) -> int:
    """Serve the store at --root until Ctrl-C (exit 130)."""
    # Imported here: `journal ls` and the other commands import this module for its
    # parser, and need none of the HTTP server.
    import gc
    import json
    import threading
    import webbrowser

    from .data import Data
    from .server import ViewerServer

    data = Data(args.root)
    # What the store has read (the catalog) lives as long as this process: kept out
    # of the cycle collector's sight, a full collection does not walk it (at 100k
    # sessions one takes 0.4-0.6 s, in whichever request triggers it).
    gc.freeze()
    try:
        server = ViewerServer(data, args.host, args.port, verbose=args.verbose)
    except OSError as exc:
        data.close()
        raise OSError(
            exc.errno, f"cannot listen on {args.host}:{args.port}: {exc.strerror}"
        ) from None
    as_json = bool(getattr(out, "json", False))
    if as_json:
        print(json.dumps({"url": server.url, "root": data.root, "pid": os.getpid()}), flush=True)
    else:
        print(f"serving {server.url} (store {data.root}, read-only; Ctrl-C stops)", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"journal serve: listening on {args.host}: other machines can reach it", file=sys.stderr
        )
    if args.open:
        threading.Thread(target=webbrowser.open, args=(server.url,), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        server.stopping.set()
        server.server_close()
        data.close()
    return EXIT_OK


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (argparse reports anything else as a usage error)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0 to 65535)")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"TCP port (default: {DEFAULT_PORT}; 0: any free one)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only)",
    )
    p.add_argument("--open", action="store_true", help="open the viewer in a web browser")
    p.add_argument("--verbose", action="store_true", help="log every request on stderr")


def add_parsers(add: Add) -> None:
    """Register `serve` (`add` returns None when another subcommand is being built)."""
    if p := add("serve", cmd_serve, "a local, read-only web viewer of the store (Ctrl-C stops)"):
        add_arguments(p)


class _Out:
    json = False


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m journal.viewer [--root DIR] [--port N] [--host H] [--open] [--json]`."""
    parser = argparse.ArgumentParser(prog="python -m journal.viewer", description=__doc__)
    parser.add_argument("--root", default=os.environ.get("JOURNAL_ROOT") or "journal-demo")
    parser.add_argument("--json", action="store_true", help="print the URL as one JSON line")
    add_arguments(parser)
    args = parser.parse_args(argv)
    out = _Out()
    out.json = args.json
    try:
        return cmd_serve(args, out)
    except (JournalError, OSError) as exc:
        print(f"journal serve: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
