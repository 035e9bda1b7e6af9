"""Export sessions to one verified bundle file, and import a bundle into a store.

A bundle is a tar archive compressed with zstd. It holds, per session, the
identity file and the log segments cut at the end of the last complete commit
(caches are left out: the importer rebuilds them), the state directories whose
scope is an exported session id, and `MANIFEST.json` last: bundle format,
creation time, and per file its path, size and SHA-256.

Export reads each log through its checksums first, so it captures every session
up to a commit even while a writer appends (sealed segments never change; the
newest is copied only up to the commit the scan ended on).

Import extracts into the store's `tmp/`, checks every size and SHA-256 against
the manifest and every log with `verify`, refuses id collisions unless told to
rename, and then publishes each session directory with one rename, parents
before children: a half-imported session never appears.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import zstandard

from . import fsio, sessiondir
from .errors import CorruptionError, InvalidInputError, NotFoundError, StorageError
from .layout import (
    IDENTITY_FILE,
    LOCK_FILE,
    LOG_DIR,
    SESSIONS_DIR,
    TMP_DIR,
    dir_name,
    session_path,
    state_path,
)
from .metafile import KIND_IDENTITY, read_meta
from .publish import install
from .scan import ScanState
from .segment import SEGMENT_HEADER_SIZE
from .sessiondir import SessionIdentity, open_log
from .state import read_value
from .store import Store
from .verify import SEVERITY_DATA, first_damage, verify_session_dir

BUNDLE_FORMAT = 1
MANIFEST = "MANIFEST.json"
_CHUNK = 1 << 20

Progress = Callable[[str], None]


@dataclass
class ExportReport:
    path: str
    sessions: list[dict[str, Any]] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0


class _HashingReader(io.RawIOBase):
    """Reads at most `limit` bytes of a file and hashes what it hands out."""

    def __init__(self, path: str, limit: int):
        self._f = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._left = limit
        self.sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buf)[: min(len(buf), self._left)]
        n = self._f.readinto(view)
        if not n:
            return 0
        self.sha.update(view[:n])
        self._left -= n
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def _session_files(directory: str) -> tuple[SessionIdentity, list[tuple[str, int]], ScanState]:
    """The files of a session to bundle and how many bytes of each (cut at a commit)."""
    ident = msgspec.msgpack.decode(
        read_meta(os.path.join(directory, IDENTITY_FILE), KIND_IDENTITY), type=SessionIdentity
    )
    log = open_log(directory)
    try:
        state = ScanState()
        for _ in log.committed(0, state, strict=False):
            pass
        segments = list(log.segments)
    finally:
        log.close()
    files = [(os.path.join(directory, IDENTITY_FILE), -1)]
    for seg in segments:
        if seg.base > state.end:
            break  # a segment begun after the commit we ended on
        # (one whose base is that end follows a SEAL, which names it: its header goes too)
        size = os.path.getsize(seg.path)
        cut = SEGMENT_HEADER_SIZE + state.end - seg.base
        files.append((seg.path, min(size, cut)))
    return ident, files, state


class DamagedSessionsError(CorruptionError):
    """Export refused: sessions whose logs `verify` finds damaged (`damaged` lists
    each as (session id, error)); nothing was written."""

    def __init__(self, damaged: list[tuple[str, CorruptionError]]):
        sid, first = damaged[0]
        more = ""
        if len(damaged) > 1:
            more = f"; {len(damaged) - 1} more damaged: " + ", ".join(
                repr(s) for s, _ in damaged[1:]
            )
        super().__init__(
            f"session {sid!r} is damaged, so it cannot be exported whole: {first}{more}"
        )
        self.path = first.path
        self.offset = first.offset
        self.damaged = damaged


def export_sessions(
    root: str,
    session_ids: list[str],
    out_path: str,
    *,
    with_ancestors: bool = False,
    overwrite: bool = False,
    salvage: bool = False,
    progress: Progress | None = None,
) -> ExportReport:
    """Write the sessions (and with `with_ancestors` their fork parents) to one bundle.

    With `salvage`, a damaged session is not refused: the bundle holds what
    `journal.salvage` copies of it (every commit that still verifies), and its
    manifest entry's `salvaged` says what is missing, which `import` reports.

    Refused before anything is written when a session does not exist
    (`NotFoundError`), when `out_path` exists and `overwrite` is false or its
    directory does not exist (`InvalidInputError`, `NotFoundError`), and when
    `verify` finds any chosen session damaged (`DamagedSessionsError`, naming
    each): a bundle never holds a readable prefix in place of a session. The
    bundle is written to a temporary file beside `out_path` and renamed over it
    once synced; on any failure that file is removed and `out_path` is as before.
    """
    out_dir = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(out_dir):
        raise NotFoundError(f"cannot write {out_path}: directory {out_dir} does not exist")
    if os.path.isdir(out_path):
        raise InvalidInputError(f"cannot write {out_path}: it is a directory")
    if os.path.lexists(out_path) and not overwrite:
        raise InvalidInputError(f"{out_path} exists (use --force to overwrite it)")
    chosen: list[str] = []
    damaged: list[tuple[str, CorruptionError]] = []
    queue = list(dict.fromkeys(session_ids))
    while queue:
        sid = queue.pop(0)
        if sid in chosen:
            continue
        directory = session_path(root, sid)
        # Without a complete commit: a creation a power loss cut short, absent to the
        # store (damage there raises CorruptionError, as for the store).
        try:
            exists = os.path.isdir(directory) and sessiondir.has_commit(directory)
        except CorruptionError as exc:
            damaged.append((sid, exc))
            chosen.append(sid)
            continue
        if not exists:
            raise NotFoundError(f"session {sid!r} does not exist in {root}")
        chosen.append(sid)
        if with_ancestors:
            ident = msgspec.msgpack.decode(
                read_meta(os.path.join(directory, IDENTITY_FILE), KIND_IDENTITY),
                type=SessionIdentity,
            )
            if ident.parent_session_id is not None:
                queue.append(ident.parent_session_id)
    for sid in chosen:
        if any(sid == d for d, _ in damaged):
            continue
        if progress:
            progress(f"verify {sid}")
        damage = first_damage(session_path(root, sid))
        if damage is not None:
            damaged.append((sid, damage))
    with tempfile.TemporaryDirectory(prefix="journal-salvage-") as scratch:
        salvaged: dict[str, tuple[str, dict[str, Any]]] = {}
        if damaged and salvage:
            damaged = _salvage_all(root, damaged, scratch, salvaged, progress)
        if damaged:
            raise DamagedSessionsError(damaged)
        return _publish_bundle(root, chosen, out_path, out_dir, salvaged, progress)


def _salvage_all(
    root: str,
    damaged: list[tuple[str, CorruptionError]],
    scratch: str,
    salvaged: dict[str, tuple[str, dict[str, Any]]],
    progress: Progress | None,
) -> list[tuple[str, CorruptionError]]:
    """Salvage each damaged session into a scratch store of its own; return those
    of which nothing could be salvaged."""
    from .salvage import salvage_directory

    left: list[tuple[str, CorruptionError]] = []
    for n, (sid, damage) in enumerate(damaged):
        if progress:
            progress(f"salvage {sid}")
        scratch_root = os.path.join(scratch, str(n))
        with Store(scratch_root) as scratch_store:
            try:
                got = salvage_directory(session_path(root, sid), sid, scratch_store, sid)
            except CorruptionError as exc:
                left.append((sid, exc))
                continue
        salvaged[sid] = (
            scratch_root,
            {
                "damage": str(damage),
                "checkpoints_copied": got.saves,
                "events_copied": got.events,
                "renumbered": got.renumbered,
                "skipped": got.skipped,
            },
        )
    return left


def _publish_bundle(
    root: str,
    chosen: list[str],
    out_path: str,
    out_dir: str,
    salvaged: dict[str, tuple[str, dict[str, Any]]],
    progress: Progress | None,
) -> ExportReport:
    tmp_out = os.path.join(out_dir, f".{os.path.basename(out_path)}.tmp.{uuid.uuid4().hex[:8]}")
    try:
        report = _write_bundle(root, chosen, tmp_out, out_path, salvaged, progress)
        with open(tmp_out, "rb") as f:
            fsio.sync_file(f.fileno(), tmp_out)
        fsio.replace(tmp_out, out_path)
        fsio.sync_dir(out_dir)
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot write bundle {out_path}: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp_out)
    report.bytes_out = os.path.getsize(out_path)
    return report


def _write_bundle(
    root: str,
    chosen: list[str],
    tmp_out: str,
    out_path: str,
    salvaged: dict[str, tuple[str, dict[str, Any]]],
    progress: Progress | None,
) -> ExportReport:
    report = ExportReport(out_path)
    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "created_at": int(time.time()),
        "sessions": [],
        "state": [],
    }
    cctx = zstandard.ZstdCompressor(level=10)
    with (
        open(tmp_out, "xb") as raw,
        cctx.stream_writer(raw, closefd=False) as zout,
        tarfile.open(fileobj=zout, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for sid in chosen:
            base, note = salvaged.get(sid, (root, None))
            directory = session_path(base, sid)
            if progress:
                progress(f"export {sid}")
            ident, files, state = _session_files(directory)
            entry: dict[str, Any] = {
                "session_id": sid,
                "dir": dir_name(sid),
                "parent_session_id": ident.parent_session_id,
                "parent_sequence": ident.parent_sequence,
                "log_bytes": state.end,
                "files": [],
            }
            if note is not None:
                entry["salvaged"] = note
            for path, limit in files:
                size = os.path.getsize(path) if limit < 0 else limit
                arc = os.path.relpath(path, base)
                entry["files"].append(_add(tar, path, arc, size))
                report.bytes_in += size
            manifest["sessions"].append(entry)
            report.sessions.append(entry)
            scope_dir = state_path(root, sid)
            if os.path.isdir(scope_dir):
                state_entry: dict[str, Any] = {"scope": sid, "dir": dir_name(sid), "files": []}
                for name in sorted(os.listdir(scope_dir)):
                    if ".tmp." in name:
                        continue
                    path = os.path.join(scope_dir, name)
                    arc = os.path.relpath(path, root)
                    state_entry["files"].append(_add(tar, path, arc, os.path.getsize(path)))
                manifest["state"].append(state_entry)
        body = json.dumps(manifest, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(body)
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(body))
    return report


def _add(tar: tarfile.TarFile, path: str, arc: str, size: int) -> dict[str, Any]:
    info = tarfile.TarInfo(arc)
    info.size = size
    info.mtime = int(os.path.getmtime(path))
    info.mode = 0o644
    reader = _HashingReader(path, size)
    try:
        tar.addfile(info, reader)
    finally:
        reader.close()
    return {"path": arc, "size": size, "sha256": reader.sha.hexdigest()}


@dataclass
class ImportReport:
    installed: list[tuple[str, str]] = field(default_factory=list)  # (original id, new id)
    state_scopes: list[str] = field(default_factory=list)
    # (new id, the manifest's `salvaged` note): sessions exported with parts missing
    salvaged: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def import_bundle(
    root: str,
    bundle_path: str,
    *,
    rename: bool = False,
    progress: Progress | None = None,
) -> ImportReport:
    """Verify a bundle and install its sessions into the store at `root`."""
    store = Store(root)
    try:
        return _import(store, bundle_path, rename=rename, progress=progress)
    finally:
        store.close()


def _import(
    store: Store, bundle_path: str, *, rename: bool, progress: Progress | None
) -> ImportReport:
    root = store.root
    work = os.path.join(root, TMP_DIR, f"import-{uuid.uuid4().hex}")
    os.makedirs(work)
    try:
        manifest = _extract(bundle_path, work)
        _check_files(manifest, work)
        sessions = manifest["sessions"]
        for entry in sessions:
            directory = os.path.join(work, SESSIONS_DIR, entry["dir"])
            if progress:
                progress(f"verify {entry['session_id']}")
            _, findings = verify_session_dir(directory)
            bad = [f for f in findings if f.severity == SEVERITY_DATA]
            if bad:
                raise CorruptionError(f"bundle session {entry['session_id']!r}: {bad[0]}")
        renames: dict[str, str] = {}
        collisions = [
            e["session_id"] for e in sessions if os.path.exists(store.session_dir(e["session_id"]))
        ]
        if collisions and not rename:
            raise InvalidInputError(
                "sessions already exist in the target store: "
                + ", ".join(repr(c) for c in collisions)
                + " (use --rename to import them under new ids)"
            )
        for sid in collisions:
            renames[sid] = f"{sid}~{uuid.uuid4().hex[:8]}"
        report = ImportReport()
        order = _parents_first(sessions)
        installed_dirs = []
        for entry in order:
            sid = entry["session_id"]
            new_id = renames.get(sid, sid)
            src = os.path.join(work, SESSIONS_DIR, entry["dir"])
            if new_id != sid or (entry.get("parent_session_id") in renames):
                ident = msgspec.msgpack.decode(
                    read_meta(os.path.join(src, IDENTITY_FILE), KIND_IDENTITY),
                    type=SessionIdentity,
                )
                parent = ident.parent_session_id
                ident = msgspec.structs.replace(
                    ident,
                    session_id=new_id,
                    parent_session_id=renames.get(parent, parent) if parent is not None else None,
                )
                sessiondir.write_identity(src, ident)
            os.makedirs(os.path.join(src, LOG_DIR), exist_ok=True)
            open(os.path.join(src, LOCK_FILE), "ab").close()
            dst = store.session_dir(new_id)
            install(src, dst)
            store.registry.note(os.path.basename(dst))
            installed_dirs.append(os.path.basename(dst))
            report.installed.append((sid, new_id))
            if entry.get("salvaged"):
                report.salvaged.append((new_id, entry["salvaged"]))
        for entry in manifest.get("state", []):
            scope = renames.get(entry["scope"], entry["scope"])
            for f in entry["files"]:
                item = read_value(os.path.join(work, f["path"]))
                store.state.save(scope, item.key, item.value)
            report.state_scopes.append(scope)
        store.upkeep.reconcile(installed_dirs)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _parents_first(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = {e["session_id"] for e in sessions}
    done: set[str] = set()
    out: list[dict[str, Any]] = []
    pending = list(sessions)
    while pending:
        progressed = False
        for entry in list(pending):
            parent = entry.get("parent_session_id")
            if parent is None or parent not in ids or parent in done:
                out.append(entry)
                done.add(entry["session_id"])
                pending.remove(entry)
                progressed = True
        if not progressed:
            raise CorruptionError("bundle manifest has a parent cycle")
    return out


def _extract(bundle_path: str, work: str) -> dict[str, Any]:
    dctx = zstandard.ZstdDecompressor()
    try:
        with (
            open(bundle_path, "rb") as raw,
            dctx.stream_reader(raw) as zin,
            tarfile.open(fileobj=zin, mode="r|") as tar,
        ):
            for member in tar:
                name = member.name
                if (
                    not member.isfile()
                    or name.startswith(("/", "\\"))
                    or ".." in name.replace("\\", "/").split("/")
                ):
                    raise CorruptionError(
                        f"bundle member {name!r} is not a plain relative file", path=bundle_path
                    )
                target = os.path.join(work, name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None
                with open(target, "wb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)
    except (tarfile.TarError, zstandard.ZstdError, EOFError) as exc:
        raise CorruptionError(f"bundle is not a readable archive: {exc}", path=bundle_path) from exc
    except FileNotFoundError as exc:
        raise NotFoundError(f"no bundle at {bundle_path}") from exc
    try:
        with open(os.path.join(work, MANIFEST), "rb") as f:
            manifest: dict[str, Any] = json.load(f)
    except (FileNotFoundError, ValueError) as exc:
        raise CorruptionError(f"bundle has no readable {MANIFEST}", path=bundle_path) from exc
    if manifest.get("format") != BUNDLE_FORMAT:
        raise CorruptionError(
            f"bundle format {manifest.get('format')!r} is not supported", path=bundle_path
        )
    return manifest


def _check_files(manifest: dict[str, Any], work: str) -> None:
    listed = set()
    for group in (*manifest["sessions"], *manifest.get("state", [])):
        for f in group["files"]:
            listed.add(f["path"])
            path = os.path.join(work, f["path"])
            sha = hashlib.sha256()
            size = 0
            with open(path, "rb") as fh:
                while chunk := fh.read(_CHUNK):
                    sha.update(chunk)
                    size += len(chunk)
            if size != f["size"] or sha.hexdigest() != f["sha256"]:
                raise CorruptionError(
                    f"bundle file {f['path']} does not match its manifest"
                    f" (size {size} vs {f['size']})",
                    path=f["path"],
                )
    for dirpath, _dirs, files in os.walk(work):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), work)
            if rel != MANIFEST and rel not in listed:
                raise CorruptionError(f"bundle holds {rel}, which its manifest does not list")
