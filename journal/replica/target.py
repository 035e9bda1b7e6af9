"""Where a replica lives: `s3://bucket/prefix` plus the S3 settings of the environment.

`parse_replica_url` takes the bucket and the key prefix from the URL and everything
else the way the AWS CLI and SDKs take it from the environment:

- `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`: an S3-compatible server (SeaweedFS,
  Ceph radosgw, MinIO, ...); unset means AWS S3 itself.
- `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`): static
  credentials; unset means boto3's own chain (profile, SSO, instance role, ...).
- `AWS_REGION`, else `AWS_DEFAULT_REGION`: the signing region; unset means the
  profile's region, else `us-east-1` (objects.py decides, as boto3 does).
- `AWS_PROFILE`: a profile of `~/.aws/config` / `~/.aws/credentials`.

Nothing here imports boto3: parsing works without the `journal[s3]` extra.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import InvalidInputError

# S3's rules for new bucket names: 3-63 characters of lowercase letters, digits, dots
# and hyphens, starting and ending with a letter or digit, no "..", not an IPv4 address.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
_MAX_PREFIX = 512  # bytes: leaves most of S3's 1024-byte key limit to the layout's keys


@dataclass(frozen=True)
class ReplicaTarget:
    """A bucket, a key prefix in it, and how to reach and sign for it.

    `prefix` has no leading or trailing slash and may be "" (the bucket's root).
    The secret and the session token never appear in `repr`.
    """

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The `s3://bucket/prefix` URL of this target (no endpoint, no credentials)."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def where(self) -> str:
        """The endpoint, for messages: its URL, or "AWS S3" with the region."""
        if self.endpoint_url:
            return self.endpoint_url
        return f"AWS S3 ({self.region or 'default region'})"


def parse_replica_url(url: str, *, environ: Mapping[str, str] | None = None) -> ReplicaTarget:
    """The target of `s3://bucket[/prefix]`, with the S3 settings of `environ`
    (default: `os.environ`). Raises InvalidInputError naming what is wrong."""
    env = os.environ if environ is None else environ
    if not isinstance(url, str):
        raise InvalidInputError(
            f"a replica URL must be a string like s3://bucket/prefix, not {url!r}"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidInputError(f"replica URL {url!r} is not a URL: {exc}") from exc
    if parts.scheme.lower() != "s3" or not url[:5].lower() == "s3://":
        raise InvalidInputError(
            f"replica URL {url!r}: only s3://bucket/prefix is supported"
            " (set AWS_ENDPOINT_URL for an S3-compatible server)"
        )
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise InvalidInputError(f"replica URL {url!r}: no query or fragment is allowed")
    netloc = parts.netloc
    if "@" in netloc or ":" in netloc:
        raise InvalidInputError(
            f"replica URL {url!r}: the part after s3:// is a bucket name; credentials and"
            " endpoints come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL"
        )
    bucket = netloc
    _check_bucket(url, bucket)
    prefix = _prefix(url, parts.path)
    endpoint = _endpoint(env)
    key_id = _env(env, "AWS_ACCESS_KEY_ID")
    secret = _env(env, "AWS_SECRET_ACCESS_KEY")
    if (key_id is None) != (secret is None):
        have, lack = (
            ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
            if key_id
            else ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID")
        )
        raise InvalidInputError(
            f"replica {url}: {have} is set but {lack} is not; set both or neither"
        )
    return ReplicaTarget(
        bucket=bucket,
        prefix=prefix,
        endpoint_url=endpoint,
        region=_env(env, "AWS_REGION") or _env(env, "AWS_DEFAULT_REGION"),
        profile=_env(env, "AWS_PROFILE"),
        access_key_id=key_id,
        secret_access_key=secret,
        session_token=_env(env, "AWS_SESSION_TOKEN") if key_id else None,
    )


def key(target: ReplicaTarget, *parts: str) -> str:
    """The object key of `parts` under the target's prefix, joined by "/".

    A part may itself hold slashes ("sessions/x") and the last may end with one (a
    listing prefix); none may be empty or start with a slash.
    """
    for i, part in enumerate(parts):
        if not part or part.startswith("/") or (part.endswith("/") and i < len(parts) - 1):
            raise InvalidInputError(
                f"object key part {part!r} of {parts!r} is empty or has a stray '/'"
            )
    joined = "/".join(parts)
    if not target.prefix:
        return joined
    return f"{target.prefix}/{joined}" if joined else target.prefix


def _check_bucket(url: str, bucket: str) -> None:
    if not bucket:
        raise InvalidInputError(f"replica URL {url!r} names no bucket: use s3://bucket/prefix")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket or _IPV4.fullmatch(bucket):
        raise InvalidInputError(
            f"replica URL {url!r}: {bucket!r} is not a valid S3 bucket name (3-63 lowercase"
            " letters, digits, '.' and '-', starting and ending with a letter or digit)"
        )


def _prefix(url: str, path: str) -> str:
    prefix = path.strip("/")
    if not prefix:
        return ""
    if len(prefix.encode("utf-8")) > _MAX_PREFIX:
        raise InvalidInputError(
            f"replica URL {url!r}: the prefix is longer than {_MAX_PREFIX} bytes"
        )
    for segment in prefix.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidInputError(
                f"replica URL {url!r}: the prefix {prefix!r} has an empty, '.' or '..' segment"
            )
        if any(ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in segment):
            raise InvalidInputError(
                f"replica URL {url!r}: the prefix {prefix!r} holds a control character or '\\'"
            )
    return prefix


def _endpoint(env: Mapping[str, str]) -> str | None:
    name = "AWS_ENDPOINT_URL_S3" if _env(env, "AWS_ENDPOINT_URL_S3") else "AWS_ENDPOINT_URL"
    endpoint = _env(env, name)
    if endpoint is None:
        return None
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise InvalidInputError(f"{name}={endpoint!r} is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(
            f"{name}={endpoint!r} must be an http:// or https:// URL with a host"
        )
    return endpoint.rstrip("/")


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None
