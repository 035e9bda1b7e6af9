"""The object store a replica lives in: a few S3 calls over boto3, typed errors.

`ObjectStore` is the only module that talks to S3; everything else in
`journal/replica/` uses its seven methods. What it guarantees:

- **Conditional writes.** `put_if_absent` sends `If-None-Match: *`; `put_if_match`
  sends `If-Match` with the ETag *unquoted* (Ceph radosgw 16.2 answers 412 to the
  quoted form; SeaweedFS and AWS accept both). A failed condition (412) is an
  answer, not an error: False / None. `If-Match` on an absent key is 412 on Ceph and
  SeaweedFS and 404 on AWS: both give None. A 409 `ConditionalRequestConflict`
  (AWS: another conditional write on the key is in flight) is retried a few times
  and then answered like a 412, the conservative reading: the caller re-reads the
  key and decides.
- **A retried conditional write may have been ours.** botocore retries a request
  whose answer was lost (timeout, reset); if the first attempt landed, the retry
  gets 412. So False / None means "the key is not what you conditioned on", and the
  caller compares the stored object with what it meant to write (the chunk's writer
  id and epoch, the lease's nonce).
- **Typed errors, nothing of botocore escapes.** Connection failures, timeouts,
  5xx and throttling after the bounded retries raise `ReplicaUnavailableError`;
  everything else (403, a missing bucket, bad credentials, a bad request) raises
  `ReplicaError`. Every message names the endpoint, the bucket and the key.
- **Bounded time.** Standard retry mode with `max_attempts` attempts in all, and
  connect and read timeouts: a dead endpoint fails in about
  `max_attempts * (connect_timeout + backoff)`, a black hole in about
  `max_attempts * read_timeout`.
- **Portable checksums.** `request_checksum_calculation="when_required"` and
  `response_checksum_validation="when_required"`: no CRC32 trailers on plain PUTs,
  which older S3-compatible servers reject.
- **Threads.** One instance (one boto3 client) is shared by every thread of the
  process; boto3 clients are thread-safe once created, and `max_pool_connections`
  bounds the HTTP connections they use at once. Creation is not shared: each
  `ObjectStore` builds its own boto3 session.

boto3 is imported here, lazily, and only when a store is opened: without the
`journal[s3]` extra the rest of journal works and this raises ReplicaError.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple, NoReturn, TypeVar

from ..errors import InvalidInputError, ReplicaError, ReplicaUnavailableError
from .target import ReplicaTarget

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT = 2.0  # seconds
DEFAULT_READ_TIMEOUT = 10.0  # seconds
DEFAULT_MAX_ATTEMPTS = 4  # attempts in all, the first included
DEFAULT_MAX_POOL_CONNECTIONS = 32  # concurrent shippers + restore fetchers
_CONFLICT_ATTEMPTS = 4  # 409 ConditionalRequestConflict answers before giving up
_CONFLICT_PAUSE = 0.05  # seconds, doubled after each 409
_DELETE_BATCH = 1000  # keys per DeleteObjects, S3's limit
_MAX_PAGE = 1000  # keys per ListObjectsV2 page, S3's limit
_UNAVAILABLE_CODES = {
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
}
_CONFLICT_CODES = {"ConditionalRequestConflict", "OperationAborted"}  # 409: a write in flight
_INSTALL_HINT = "pip install 'journal[s3]'"


class ObjectInfo(NamedTuple):
    """One object of a listing."""

    key: str
    size: int
    last_modified_ms: int
    etag: str  # unquoted


def open_object_store(
    target: ReplicaTarget,
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    max_pool_connections: int = DEFAULT_MAX_POOL_CONNECTIONS,
) -> ObjectStore:
    """An ObjectStore on `target`'s bucket. Sends no request: a missing bucket or
    unreachable endpoint shows at the first call (or at `check_bucket`)."""
    return ObjectStore(
        target,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_attempts=max_attempts,
        max_pool_connections=max_pool_connections,
    )


def create_bucket(target: ReplicaTarget) -> None:
    """Create `target`'s bucket; a bucket this account already owns is fine."""
    store = open_object_store(target)
    try:
        store.create_bucket()
    finally:
        store.close()


class ObjectStore:
    """A bucket, through one boto3 S3 client (see the module's doc for the rules)."""

    def __init__(
        self,
        target: ReplicaTarget,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_pool_connections: int = DEFAULT_MAX_POOL_CONNECTIONS,
    ) -> None:
        if not (connect_timeout > 0 and read_timeout > 0):
            raise InvalidInputError(
                f"timeouts must be positive, not connect={connect_timeout!r} read={read_timeout!r}"
            )
        if max_attempts < 1 or max_pool_connections < 1:
            raise InvalidInputError(
                f"max_attempts ({max_attempts!r}) and max_pool_connections"
                f" ({max_pool_connections!r}) must be at least 1"
            )
        self.target = target
        self.bucket = target.bucket
        self.where = target.where
        self.max_attempts = max_attempts
        boto3, config_cls, self._exc = _import_boto()
        config = config_cls(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            max_pool_connections=max_pool_connections,
            s3={"addressing_style": "path"},
            signature_version="s3v4",
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        try:
            session = boto3.session.Session(
                profile_name=target.profile,
                aws_access_key_id=target.access_key_id,
                aws_secret_access_key=target.secret_access_key,
                aws_session_token=target.session_token,
                region_name=target.region,
            )
            self._client: Any = session.client(
                "s3",
                endpoint_url=target.endpoint_url,
                region_name=target.region or session.region_name or "us-east-1",
                config=config,
            )
        except Exception as exc:  # botocore raises many kinds here (profile, config, URL)
            raise ReplicaError(
                f"cannot set up an S3 client for {target.url} at {self.where}: {exc}"
            ) from exc
        if target.endpoint_url is None:
            self.where = f"{self._client.meta.endpoint_url} (AWS S3)"

    # -- the interface -------------------------------------------------------------

    def put(self, key: str, body: bytes) -> str:
        """Write `key` unconditionally; returns its ETag (unquoted)."""
        resp = self._call("PUT", key, lambda: self._client.put_object(**self._put_args(key, body)))
        return _unquote(resp.get("ETag", ""))

    def put_if_absent(self, key: str, body: bytes) -> bool:
        """Create `key` unless it exists (`If-None-Match: *`): True created, False it
        existed (or a 409 conflict persisted; see the module's doc)."""
        args = {**self._put_args(key, body), "IfNoneMatch": "*"}
        return self._conditional("PUT If-None-Match", key, args) is not None

    def put_if_match(self, key: str, body: bytes, etag: str) -> str | None:
        """Replace `key` if its ETag is `etag` (`If-Match`, sent unquoted): its new
        ETag, or None when the key changed or is absent (412/404, or a lasting 409)."""
        if not etag:
            raise InvalidInputError(f"put_if_match of {key!r} needs an ETag, got {etag!r}")
        args = {**self._put_args(key, body), "IfMatch": _unquote(etag)}
        return self._conditional("PUT If-Match", key, args)

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The body and ETag (unquoted) of `key`, or None if it does not exist."""
        for attempt in range(1, self.max_attempts + 1):
            try:
                resp = self._client.get_object(Bucket=self.bucket, Key=key)
            except self._exc.ClientError as exc:
                if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                    return None
                self._raise("GET", key, exc)
            except self._exc.BotoCoreError as exc:
                self._raise("GET", key, exc)
            try:
                body = resp["Body"].read()
            except self._exc.BotoCoreError as exc:
                # a body cut off or stalled mid-read: botocore had its answer, so it does
                # not retry; this does, within the same bound
                if attempt == self.max_attempts:
                    self._raise("GET", key, exc)
                continue
            return bytes(body), _unquote(resp.get("ETag", ""))
        raise AssertionError("unreachable")  # pragma: no cover

    def list(
        self, prefix: str, *, start_after: str = "", page_size: int = _MAX_PAGE
    ) -> Iterator[ObjectInfo]:
        """The objects whose key starts with `prefix` (and sorts after `start_after`),
        in key order, one ListObjectsV2 page of `page_size` keys per request."""
        if not 1 <= page_size <= _MAX_PAGE:
            raise InvalidInputError(f"page_size must be 1..{_MAX_PAGE}, not {page_size!r}")
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": page_size}
        if start_after:
            args["StartAfter"] = start_after
        while True:
            page = self._call("LIST", prefix + "*", partial(self._client.list_objects_v2, **args))
            for item in page.get("Contents", ()):
                modified = item["LastModified"]
                yield ObjectInfo(
                    key=item["Key"],
                    size=int(item.get("Size", 0)),
                    last_modified_ms=int(modified.timestamp() * 1000),
                    etag=_unquote(item.get("ETag", "")),
                )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            args = {
                "Bucket": self.bucket,
                "Prefix": prefix,
                "MaxKeys": page_size,
                "ContinuationToken": token,
            }

    def delete(self, keys: Sequence[str]) -> None:
        """Delete `keys` (batches of 1000); keys that do not exist are ignored."""
        keys = list(dict.fromkeys(keys))
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = keys[i : i + _DELETE_BATCH]
            spec = {"Objects": [{"Key": k} for k in batch], "Quiet": True}
            resp = self._call(
                "DELETE",
                batch[0] if len(batch) == 1 else f"{batch[0]} (+{len(batch) - 1} keys)",
                partial(self._client.delete_objects, Bucket=self.bucket, Delete=spec),
            )
            failed = [e for e in resp.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
            if failed:
                first = failed[0]
                raise ReplicaError(
                    f"DELETE of {len(failed)} of {len(batch)} keys in bucket {self.bucket!r} at"
                    f" {self.where} failed; key {first.get('Key')!r}: {first.get('Code')}"
                    f" {first.get('Message', '')}".rstrip()
                )

    def close(self) -> None:
        """Close the client's HTTP connections; the store is not used after this."""
        with contextlib.suppress(Exception):  # closing idle sockets: nothing to report
            self._client.close()

    # -- bucket helpers (tests, CLI) ----------------------------------------------

    def check_bucket(self) -> None:
        """Raise a clear ReplicaError unless the bucket exists and is reachable
        (HEAD bucket); ReplicaUnavailableError when the endpoint does not answer."""
        self._call("HEAD bucket", "", lambda: self._client.head_bucket(Bucket=self.bucket))

    def create_bucket(self) -> None:
        """Create the bucket; one this account already owns is fine."""
        args: dict[str, Any] = {"Bucket": self.bucket}
        region = self._client.meta.region_name
        if self.target.endpoint_url is None and region and region != "us-east-1":
            args["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self._client.create_bucket(**args)
        except self._exc.ClientError as exc:
            if _code(exc) != "BucketAlreadyOwnedByYou":
                self._raise("CREATE bucket", "", exc)
        except self._exc.BotoCoreError as exc:
            self._raise("CREATE bucket", "", exc)

    def delete_bucket(self) -> None:
        """Remove the (empty) bucket; one that does not exist is fine."""
        try:
            self._client.delete_bucket(Bucket=self.bucket)
        except self._exc.ClientError as exc:
            if _code(exc) != "NoSuchBucket":
                self._raise("DELETE bucket", "", exc)
        except self._exc.BotoCoreError as exc:
            self._raise("DELETE bucket", "", exc)

    # -- inside --------------------------------------------------------------------

    def _put_args(self, key: str, body: bytes) -> dict[str, Any]:
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise InvalidInputError(f"the body of {key!r} must be bytes, not {type(body).__name__}")
        data = bytes(body)
        # Content-MD5: a server that gets a PUT cut short (a reset connection) then
        # refuses it instead of keeping the bytes it got (SeaweedFS kept a 0-byte
        # object without it).
        digest = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        return {"Bucket": self.bucket, "Key": key, "Body": data, "ContentMD5": digest}

    def _conditional(self, op: str, key: str, args: dict[str, Any]) -> str | None:
        """One conditional PUT: its ETag, or None when the condition failed."""
        pause = _CONFLICT_PAUSE
        for attempt in range(1, _CONFLICT_ATTEMPTS + 1):
            try:
                resp = self._client.put_object(**args)
                return _unquote(resp.get("ETag", ""))
            except self._exc.ClientError as exc:
                code, status = _code(exc), _status(exc)
                if status == 412 or code == "PreconditionFailed":
                    return None
                if "IfMatch" in args and code in ("NoSuchKey", "404", "NotFound"):
                    return None
                if code in _CONFLICT_CODES or (status == 409 and not code):
                    if attempt < _CONFLICT_ATTEMPTS:
                        time.sleep(pause)
                        pause *= 2
                        continue
                    return None
                self._raise(op, key, exc)
            except self._exc.BotoCoreError as exc:
                self._raise(op, key, exc)
        return None  # pragma: no cover - the loop returns or raises

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (self._exc.ClientError, self._exc.BotoCoreError) as exc:
            self._raise(op, key, exc)

    def _raise(self, op: str, key: str, exc: BaseException) -> NoReturn:
        """Raise the journal error for a botocore/boto3 exception of `op` on `key`."""
        where = f"bucket {self.bucket!r}" + (f", key {key!r}" if key else "") + f" at {self.where}"
        if isinstance(exc, self._exc.ClientError):
            code, status = _code(exc), _status(exc)
            text = exc.response.get("Error", {}).get("Message") or ""
            detail = f"{code or 'error'} (HTTP {status}){': ' + text if text else ''}"
            if code == "NoSuchBucket":
                raise ReplicaError(
                    f"{op}: the bucket {self.bucket!r} does not exist at {self.where}"
                    + (f" (key {key!r})" if key else "")
                ) from exc
            if status in (404,) and op == "HEAD bucket":
                raise ReplicaError(
                    f"{op}: the bucket {self.bucket!r} does not exist at {self.where}"
                ) from exc
            if (
                (status is not None and status >= 500)
                or code in _UNAVAILABLE_CODES
                or status == 429
            ):
                raise ReplicaUnavailableError(
                    f"{op} {where}: the server failed after {self.max_attempts} attempts: {detail}"
                ) from exc
            if status == 403:
                raise ReplicaError(
                    f"{op} {where}: access denied: {detail} (check AWS_ACCESS_KEY_ID,"
                    " AWS_SECRET_ACCESS_KEY or AWS_PROFILE and the bucket's policy)"
                ) from exc
            raise ReplicaError(f"{op} {where}: {detail}") from exc
        if isinstance(exc, (self._exc.NoCredentialsError, self._exc.PartialCredentialsError)):
            raise ReplicaError(
                f"{op} {where}: no S3 credentials (set AWS_ACCESS_KEY_ID and"
                f" AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): {exc}"
            ) from exc
        if isinstance(exc, self._exc.SSLError):
            raise ReplicaError(f"{op} {where}: TLS failed: {exc}") from exc
        unavailable = (
            self._exc.HTTPClientError,  # reset, read timeout, a body cut off
            self._exc.ConnectionError,  # refused, connect timeout, proxy
            self._exc.IncompleteReadError,
        )
        if isinstance(exc, unavailable):
            raise ReplicaUnavailableError(
                f"{op} {where}: the server did not answer after {self.max_attempts}"
                f" attempts: {type(exc).__name__}: {exc}"
            ) from exc
        raise ReplicaError(f"{op} {where}: {type(exc).__name__}: {exc}") from exc


def _import_boto() -> tuple[Any, Any, Any]:
    """boto3, botocore.config.Config and botocore.exceptions, or a ReplicaError."""
    try:
        import boto3
        import boto3.session
        import botocore.exceptions
        from botocore.config import Config
    except ImportError as exc:
        raise ReplicaError(
            f"replication to S3 needs boto3, which is not installed: {_INSTALL_HINT} ({exc})"
        ) from exc
    return boto3, Config, botocore.exceptions


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")


def _status(exc: Any) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _unquote(etag: str) -> str:
    return etag.strip().removeprefix("W/").strip('"')
