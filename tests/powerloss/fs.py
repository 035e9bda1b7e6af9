"""A FUSE passthrough that records what a power loss could leave behind.

Run as a process: `python fs.py BACKING MOUNTPOINT CONTROL_SOCKET`. Every
operation on MOUNTPOINT is performed on BACKING, and a model of stable storage
is kept beside it. The model trusts nothing the library says about itself: it
sees only the system calls that reach the file system.

The model (strict POSIX, as FORMAT.md section 6 states its rules):

- a file's content is durable as of its last fsync/fdatasync; writes and
  truncations since are pending;
- a directory's entries (create, mkdir, unlink, rmdir, rename) are durable as
  of the directory's own last fsync; an entry made since is absent after a
  power loss, a removal since has not happened, and everything under a
  directory whose own entry is not durable is gone with it;
- a rename is atomic: its new name becomes durable with a sync of the
  destination directory, and only then does the old name go (until then the
  object keeps its old durable name). FORMAT.md relies on this, as every
  rename-based commit protocol does.

A crash image is the durable state plus, per file and seeded at random, an
in-order prefix of its pending writes, the last kept one torn at a sector
boundary ("prefix", the persistence FORMAT.md section 5 assumes), or any subset
of the pending sectors ("subset", stricter than the library claims to survive),
or nothing pending at all ("durable").
Nothing synced is ever dropped.

Faults: a rule names an operation, a glob over the path (relative to the
mount, with a leading "/"), an errno, how many matching calls to let through
first and how many to fail. "lose" takes an image and then fails every further
operation with EIO, as a disk that went away.

The control socket takes one JSON object per line and answers one per line:
  {"cmd": "ping"}
  {"cmd": "images", "dir": D, "prob": P, "max": N, "seed": S, "side": F,
   "tear": "prefix"|"subset"}: before each mutating operation, with probability
   P (at most N times), write an image to D/img-K and its description to
   D/img-K.json (the operation, the path and the text of the side file F then)
  {"cmd": "image", "dest": D, "seed": S}: one image now
  {"cmd": "fault", "op": OP, "path": GLOB, "errno": "ENOSPC", "skip": 0, "count": 1}
  {"cmd": "clear"}: drop every fault rule
  {"cmd": "lose", "dest": D}: image at D, then every operation fails
  {"cmd": "lose", "dest": D, "after": N, "side": F}: the same at the N-th
   mutating operation from now (it fails too)
  {"cmd": "stats"}: counts of operations seen and faults injected
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import random
import socket
import sys
import threading
from typing import Any

from fuse import FUSE, FuseOSError, Operations

SECTOR = 512
MUTATING = {
    "write",
    "truncate",
    "fsync",
    "fsyncdir",
    "create",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
}

Pending = tuple[str, int, bytes]  # ("w", offset, data) or ("t", size, b"")


def apply(data: bytearray, op: Pending) -> None:
    kind, offset, chunk = op
    if kind == "t":
        del data[offset:]
        data.extend(bytes(max(0, offset - len(data))))
        return
    if offset > len(data):
        data.extend(bytes(offset - len(data)))
    data[offset : offset + len(chunk)] = chunk


class Model:
    """Identities, durable content and durable directory entries."""

    def __init__(self, backing: str):
        self.backing = backing
        self._next = 0
        self.ids: dict[str, int] = {}  # current path ("/a/b") -> identity
        self.is_dir: dict[int, bool] = {}
        self.durable: dict[int, bytearray] = {}  # file identity -> content at last sync
        self.pending: dict[int, list[Pending]] = {}
        self.entries: dict[int, dict[str, int]] = {}  # dir identity -> durable entries
        self._adopt("/")

    def new(self, path: str, is_dir: bool) -> int:
        ident = self._next
        self._next += 1
        self.ids[path] = ident
        self.is_dir[ident] = is_dir
        if is_dir:
            self.entries[ident] = {}
        else:
            self.durable[ident] = bytearray()
            self.pending[ident] = []
        return ident

    def _adopt(self, path: str) -> None:
        """What BACKING holds at mount time is durable."""
        real = self.real(path)
        ident = self.new(path, os.path.isdir(real))
        if not self.is_dir[ident]:
            with open(real, "rb") as f:
                self.durable[ident] = bytearray(f.read())
            return
        for name in sorted(os.listdir(real)):
            child = path.rstrip("/") + "/" + name
            self._adopt(child)
            self.entries[ident][name] = self.ids[child]

    def real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def ident(self, path: str) -> int:
        ident = self.ids.get(path)
        if ident is None:  # not created through the mount: adopt it as it is now
            ident = self.new(path, os.path.isdir(self.real(path)))
        return ident

    def move(self, src: str, dst: str) -> None:
        for p in [p for p in self.ids if p == dst or p.startswith(dst + "/")]:
            del self.ids[p]
        for p in [p for p in self.ids if p == src or p.startswith(src + "/")]:
            self.ids[dst + p[len(src) :]] = self.ids.pop(p)

    def forget(self, path: str) -> None:
        for p in [p for p in self.ids if p == path or p.startswith(path + "/")]:
            del self.ids[p]

    def listing(self, path: str) -> dict[str, int]:
        prefix = path.rstrip("/") + "/"
        return {
            p[len(prefix) :]: i
            for p, i in self.ids.items()
            if p.startswith(prefix) and "/" not in p[len(prefix) :]
        }

    def sync_file(self, ident: int) -> None:
        data = self.durable[ident]
        for op in self.pending[ident]:
            apply(data, op)
        self.pending[ident] = []

    def sync_dir(self, path: str) -> None:
        ident = self.ids[path]
        now = self.listing(path)
        alive, here = set(self.ids.values()), set(now.values())
        # An object renamed away keeps its old durable name until its new
        # directory is synced; one unlinked or renamed within loses it now.
        kept = {n: c for n, c in self.entries[ident].items() if c in alive and c not in here}
        for entries in self.entries.values():  # each rename into this directory is durable now
            for n in [n for n, c in entries.items() if c in here]:
                del entries[n]
        self.entries[ident] = {**kept, **now}

    # -------------------------------------------------------------- images
    def image(self, dest: str, rng: random.Random, tear: str) -> None:
        self._build(self.ids["/"], dest, rng, tear, set())

    def _build(self, ident: int, dest: str, rng: random.Random, tear: str, seen: set[int]) -> None:
        os.makedirs(dest, exist_ok=True)
        seen.add(ident)
        for name, child in sorted(self.entries[ident].items()):
            if child in seen:
                continue
            target = os.path.join(dest, name)
            if self.is_dir[child]:
                self._build(child, target, rng, tear, seen)
            else:
                with open(target, "wb") as f:
                    f.write(self.crashed(child, rng, tear))

    def crashed(self, ident: int, rng: random.Random, tear: str) -> bytes:
        data = bytearray(self.durable[ident])
        pending = self.pending[ident]
        if not pending or tear == "durable":
            return bytes(data)
        if tear == "subset":
            for kind, offset, chunk in pending:
                if kind == "t":
                    if rng.random() < 0.5:
                        apply(data, (kind, offset, chunk))
                    continue
                for start in range(offset - offset % SECTOR, offset + len(chunk), SECTOR):
                    lo, hi = max(start, offset), min(start + SECTOR, offset + len(chunk))
                    if rng.random() < 0.5:
                        apply(data, ("w", lo, chunk[lo - offset : hi - offset]))
            return bytes(data)
        keep = rng.randint(0, len(pending))
        for k, (kind, offset, chunk) in enumerate(pending[:keep]):
            if k == keep - 1 and kind == "w" and rng.random() < 0.6:
                bounds = [
                    b for b in range(offset - offset % SECTOR + SECTOR, offset + len(chunk), SECTOR)
                ]
                cut = rng.choice([offset, *bounds])
                chunk = chunk[: cut - offset]
            apply(data, (kind, offset, chunk))
        return bytes(data)


class Recorder(Operations):  # type: ignore[misc]
    """The passthrough; every operation runs under one lock, in one order."""

    use_ns = True

    def __init__(self, backing: str):
        self.backing = os.path.realpath(backing)
        self.model = Model(self.backing)
        self._mutex = threading.RLock()
        self.fds: dict[int, int] = {}  # fh -> identity of the file it opened
        self.rules: list[dict[str, Any]] = []
        self.lost = False
        self.seen: dict[str, int] = {}
        self.injected = 0
        self.images: dict[str, Any] | None = None
        self.images_taken = 0
        self.lose_at: dict[str, Any] | None = None

    # ------------------------------------------------------------- plumbing
    def __call__(self, op: str, *args: Any) -> Any:
        with self._mutex:
            path = args[0] if args and isinstance(args[0], str) else ""
            self.seen[op] = self.seen.get(op, 0) + 1
            if self.lost:
                raise FuseOSError(errno.EIO)
            self._fault(op, path)
            if op in MUTATING and self.images is not None:
                self._maybe_image(op, path)
            if op in MUTATING and self.lose_at is not None:
                self._maybe_lose(op, path)
            handler = getattr(self, op, None)
            if handler is None:
                raise FuseOSError(errno.ENOSYS)
            try:
                return handler(*args)
            except FuseOSError:
                raise
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from exc

    def _fault(self, op: str, path: str) -> None:
        for rule in self.rules:
            if rule["op"] not in (op, "*") or not fnmatch.fnmatchcase(path, rule["path"]):
                continue
            if rule["skip"] > 0:
                rule["skip"] -= 1
                continue
            if rule["count"] == 0:
                continue
            if rule["count"] > 0:
                rule["count"] -= 1
            self.injected += 1
            raise FuseOSError(rule["errno"])

    def _maybe_image(self, op: str, path: str) -> None:
        cfg = self.images
        assert cfg is not None
        if self.images_taken >= cfg["max"] or cfg["rng"].random() >= cfg["prob"]:
            return
        self.images_taken += 1
        dest = os.path.join(cfg["dir"], f"img-{self.images_taken:03d}")
        self._image(
            dest,
            cfg["rng"].randrange(2**32),
            cfg["tear"],
            {"op": op, "path": path, "side": cfg["side"]},
        )

    def _maybe_lose(self, op: str, path: str) -> None:
        cfg = self.lose_at
        assert cfg is not None
        cfg["countdown"] -= 1
        if cfg["countdown"] > 0:
            return
        self.lose_at = None
        self._image(
            cfg["dest"],
            cfg.get("seed", 0),
            cfg.get("tear", "prefix"),
            {"op": op, "path": path, "side": cfg.get("side")},
        )
        self.lost = True
        raise FuseOSError(errno.EIO)

    def _image(self, dest: str, seed: int, tear: str, about: dict[str, Any]) -> None:
        side = about.pop("side", None)
        if side:  # read after the lock is held: every call acknowledged here has finished
            with open(side, encoding="utf-8") as f:
                about["side_text"] = f.read()
        self.model.image(dest, random.Random(seed), tear)
        about["seed"] = seed
        with open(dest + ".json", "w", encoding="utf-8") as f:
            json.dump(about, f)

    def _real(self, path: str) -> str:
        return self.model.real(path)

    # ------------------------------------------------------------- metadata
    def getattr(self, path: str | None, fi: Any = None) -> dict[str, Any]:
        st = os.fstat(fi.fh) if path is None and fi else os.lstat(self._real(path or "/"))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino")
        out: dict[str, Any] = {k: getattr(st, k) for k in keys}
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def access(self, path: str, amode: int) -> None:
        if not os.access(self._real(path), amode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._real(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._real(path), uid, gid)

    def utimens(self, path: str, times: Any = None) -> None:
        os.utime(self._real(path), ns=times) if times else os.utime(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        keys = (
            "f_bavail",
            "f_bfree",
            "f_blocks",
            "f_bsize",
            "f_favail",
            "f_ffree",
            "f_files",
            "f_flag",
            "f_frsize",
            "f_namemax",
        )
        return {k: getattr(st, k) for k in keys}

    # ---------------------------------------------------------- directories
    def opendir(self, path: str) -> int:
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def releasedir(self, path: str, fh: int) -> None:
        return None

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        fd = os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.model.sync_dir(path)

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._real(path), mode)
        self.model.new(path, True)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._real(path))
        self.model.forget(path)

    def unlink(self, path: str) -> None:
        os.unlink(self._real(path))
        self.model.forget(path)

    def rename(self, old: str, new: str) -> None:
        self.model.ident(old)
        os.rename(self._real(old), self._real(new))
        self.model.move(old, new)

    def link(self, target: str, source: str) -> None:
        raise FuseOSError(errno.EPERM)  # hard links would need a name list per identity

    def symlink(self, target: str, source: str) -> None:
        raise FuseOSError(errno.EPERM)

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def mknod(self, path: str, mode: int, dev: int) -> None:
        raise FuseOSError(errno.EPERM)

    # ---------------------------------------------------------------- files
    def _open(self, path: str, flags: int, fi: Any, mode: int | None) -> int:
        flags &= ~(os.O_APPEND | getattr(os, "O_DIRECT", 0))  # the kernel passes the offsets
        real = self._real(path)
        existed = os.path.lexists(real)
        fd = os.open(real, flags, mode) if mode is not None else os.open(real, flags)
        if mode is not None and not existed:
            ident = self.model.new(path, False)
        else:
            ident = self.model.ident(path)
        if flags & os.O_TRUNC:
            self.model.pending[ident].append(("t", 0, b""))
        self.fds[fd] = ident
        fi.fh = fd
        fi.direct_io = True  # every write reaches us when it is made, not at writeback
        return 0

    def open(self, path: str, fi: Any) -> int:
        return self._open(path, fi.flags, fi, None)

    def create(self, path: str, mode: int, fi: Any) -> int:
        return self._open(path, fi.flags | os.O_CREAT, fi, mode)

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        return os.pread(fi.fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        n = os.pwrite(fi.fh, data, offset)
        self.model.pending[self.fds[fi.fh]].append(("w", offset, bytes(data[:n])))
        return n

    def truncate(self, path: str, length: int, fi: Any = None) -> None:
        if fi is not None and getattr(fi, "fh", 0) in self.fds:
            os.ftruncate(fi.fh, length)
            ident = self.fds[fi.fh]
        else:
            os.truncate(self._real(path), length)
            ident = self.model.ident(path)
        self.model.pending[ident].append(("t", length, b""))

    def flush(self, path: str, fi: Any) -> None:
        return None

    def fsync(self, path: str, datasync: int, fi: Any) -> None:
        (os.fdatasync if datasync else os.fsync)(fi.fh)
        self.model.sync_file(self.fds[fi.fh])

    def release(self, path: str, fi: Any) -> None:
        self.fds.pop(fi.fh, None)
        os.close(fi.fh)

    # --------------------------------------------------------------- control
    def control(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._mutex:
            cmd = req["cmd"]
            if cmd == "ping":
                return {"ok": True}
            if cmd == "images":
                self.images_taken = 0
                self.images = {
                    "dir": req["dir"],
                    "prob": float(req["prob"]),
                    "max": req["max"],
                    "rng": random.Random(req["seed"]),
                    "side": req.get("side"),
                    "tear": req.get("tear", "prefix"),
                }
                os.makedirs(req["dir"], exist_ok=True)
                return {"ok": True}
            if cmd == "image":
                self._image(
                    req["dest"],
                    req.get("seed", 0),
                    req.get("tear", "prefix"),
                    {"op": "control", "path": "", "side": req.get("side")},
                )
                return {"ok": True}
            if cmd == "fault":
                err = req["errno"]
                self.rules.append(
                    {
                        "op": req["op"],
                        "path": req.get("path", "*"),
                        "errno": getattr(errno, err) if isinstance(err, str) else err,
                        "skip": req.get("skip", 0),
                        "count": req.get("count", 1),
                    }
                )
                return {"ok": True}
            if cmd == "clear":
                self.rules.clear()
                return {"ok": True}
            if cmd == "lose" and req.get("after") is not None:
                self.lose_at = {**req, "countdown": int(req["after"])}
                return {"ok": True}
            if cmd == "lose":
                if req.get("dest"):
                    self._image(
                        req["dest"],
                        req.get("seed", 0),
                        req.get("tear", "prefix"),
                        {"op": "lose", "path": "", "side": req.get("side")},
                    )
                self.lost = True
                return {"ok": True}
            if cmd == "stats":
                return {
                    "ok": True,
                    "seen": dict(self.seen),
                    "injected": self.injected,
                    "images": self.images_taken,
                }
            return {"ok": False, "error": f"unknown command {cmd!r}"}


def serve_control(recorder: Recorder, sock_path: str) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(8)

    def handle(conn: socket.socket) -> None:
        with conn, conn.makefile("rw", encoding="utf-8") as f:
            for line in f:
                try:
                    answer = recorder.control(json.loads(line))
                except Exception as exc:  # the control channel reports, never dies
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                f.write(json.dumps(answer) + "\n")
                f.flush()

    while True:
        conn, _ = server.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def main() -> None:
    backing, mountpoint, sock_path = sys.argv[1:4]
    recorder = Recorder(backing)
    threading.Thread(target=serve_control, args=(recorder, sock_path), daemon=True).start()
    FUSE(
        recorder,
        mountpoint,
        foreground=True,
        raw_fi=True,
        use_ino=True,
        hard_remove=True,
        default_permissions=True,
        fsname="powerloss",
        subtype="powerloss",
    )


if __name__ == "__main__":
    main()
