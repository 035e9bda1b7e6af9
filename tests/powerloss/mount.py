"""Start and stop the recording file system (fs.py) for a test."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def unavailable() -> str | None:
    """Why a FUSE mount cannot work here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount") is None and shutil.which("fusermount3") is None:
        return "no fusermount (apt-get install fuse3)"
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as exc:  # OSError: libfuse.so.2 missing
        return f"fusepy cannot load libfuse ({exc}); apt-get install libfuse2"
    return None


class Mount:
    def __init__(self, base: Path):
        self.backing = base / "backing"
        self.path = base / "mnt"
        self.sock = base / "control.sock"
        self.log = base / "fs.log"
        self.backing.mkdir(parents=True)
        self.path.mkdir(parents=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self._conn: socket.socket | None = None
        self._file: Any = None

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "fs.py"),
                    str(self.backing),
                    str(self.path),
                    str(self.sock),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while not (os.path.ismount(self.path) and self.sock.exists()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the FUSE mount did not come up: {self.log.read_text()}")
            time.sleep(0.05)

    def control(self, **req: Any) -> dict[str, Any]:
        if self._conn is None:
            self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._conn.connect(str(self.sock))
            self._file = self._conn.makefile("rw", encoding="utf-8")
        self._file.write(json.dumps(req) + "\n")
        self._file.flush()
        answer: dict[str, Any] = json.loads(self._file.readline())
        if not answer.get("ok"):
            raise RuntimeError(f"control {req}: {answer}")
        return answer

    def stop(self) -> None:
        if self._conn is not None:
            self._file.close()
            self._conn.close()
            self._conn = None
        tool = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount"
        if self.proc is not None:  # not os.path.ismount: a lost mount fails its lstat
            subprocess.run(
                [tool, "-u", "-z", str(self.path)],
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        if self.proc is not None:
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def mounted(base: Path) -> Iterator[Mount]:
    m = Mount(base)
    m.start()
    try:
        yield m
    finally:
        m.stop()
