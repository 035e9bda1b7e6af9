"""Who may write a session in the bucket: the writer id of a root, and the lease.

Every root that replicates has a writer id (`ROOT/replica.id`, 16 random bytes as
32 hex digits, created once). The processes writing one root share it, as they
share the root's sessions. A session's lease object (FORMAT.md section 14) names
the writer id that owns the session and its epoch. It is created with
`If-None-Match: *` and changed only with `If-Match`, so of two hosts taking a
session at once exactly one wins. The lease says who may try to write; the fence
chunk that `take_over` writes into the session's chain (shipper.py) is what stops
the previous writer, whose every write is the next slot of that chain.
"""

from __future__ import annotations

import os
import secrets
import socket
import time

import msgspec

from .. import fsio
from ..errors import FencedError, ReplicaCorruptionError, ReplicaError, StorageError
from ..layout import REPLICA_ID_FILE
from .objects import ObjectStore

LEASE_FORMAT = 1
_ATTEMPTS = 16  # conditional writes lost to a concurrent claimant before giving up


class Lease(msgspec.Struct, forbid_unknown_fields=False):
    """The lease object of one session (JSON)."""

    owner: str  # the writer id (32 hex digits) that may write the session
    epoch: int  # raised by one at every change of owner
    nonce: str  # random: two leases of equal content still differ (ETag is their MD5)
    taken_at_ms: int
    host: str
    format: int = LEASE_FORMAT


def writer_id(root: str) -> bytes:
    """This root's writer id, created on first use (exactly one creator wins a race)."""
    path = os.path.join(root, REPLICA_ID_FILE)
    for _ in range(2):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except FileNotFoundError:
            fsio.create_new(path, (secrets.token_hex(16) + "\n").encode("ascii"))
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise StorageError(f"cannot read the replica writer id {path}: {exc}") from exc
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raw = b""
        if len(raw) != 16:
            raise ReplicaError(f"{path} does not hold a writer id (32 hex digits): {text[:40]!r}")
        return raw
    raise StorageError(f"cannot create the replica writer id {path}")


def _decode(data: bytes, key: str) -> Lease:
    try:
        lease = msgspec.json.decode(data, type=Lease)
    except msgspec.DecodeError as exc:
        raise ReplicaCorruptionError(f"lease object {key!r} is not a lease: {exc}") from exc
    if lease.format != LEASE_FORMAT or lease.epoch < 1 or len(lease.owner) != 32:
        raise ReplicaCorruptionError(f"lease object {key!r} is not a format-1 lease: {lease}")
    return lease


def _new(owner: bytes, epoch: int) -> bytes:
    lease = Lease(
        owner=owner.hex(),
        epoch=epoch,
        nonce=secrets.token_hex(16),
        taken_at_ms=int(time.time() * 1000),
        host=socket.gethostname(),
    )
    return msgspec.json.encode(lease)


def read_lease(objects: ObjectStore, key: str) -> tuple[Lease, str] | None:
    """The lease and its ETag, or None when the session has none yet."""
    got = objects.get(key)
    if got is None:
        return None
    return _decode(got[0], key), got[1]


def claim(objects: ObjectStore, key: str, owner: bytes, session: str) -> int:
    """The epoch under which `owner` writes the session: its lease, created (epoch 1)
    when there is none. `FencedError` when another writer holds it."""
    for _ in range(_ATTEMPTS):
        got = read_lease(objects, key)
        if got is None:
            if objects.put_if_absent(key, _new(owner, 1)):
                return 1
            continue  # another writer created it first: read what it wrote
        lease = got[0]
        if lease.owner != owner.hex():
            raise FencedError(
                f"session {session!r} is written by host {lease.host!r} (writer"
                f" {lease.owner}) since epoch {lease.epoch} (lease {key!r}); call"
                " take_over to make this store its writer"
            )
        return lease.epoch
    raise ReplicaError(f"lease {key!r}: {_ATTEMPTS} conditional writes lost in a row")


def take(objects: ObjectStore, key: str, owner: bytes) -> tuple[int, int]:
    """Make `owner` the session's lease holder: (epoch before, epoch now). An owner
    that holds it already keeps its epoch (before == now)."""
    for _ in range(_ATTEMPTS):
        got = read_lease(objects, key)
        if got is None:
            if objects.put_if_absent(key, _new(owner, 1)):
                return 0, 1
            continue
        lease, etag = got
        if lease.owner == owner.hex():
            return lease.epoch, lease.epoch
        if objects.put_if_match(key, _new(owner, lease.epoch + 1), etag) is not None:
            return lease.epoch, lease.epoch + 1
    raise ReplicaError(f"lease {key!r}: {_ATTEMPTS} conditional writes lost in a row")
