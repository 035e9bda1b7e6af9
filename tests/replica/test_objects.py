"""ObjectStore and ReplicaTarget against a real S3 server (SeaweedFS, or Ceph radosgw
through JOURNAL_TEST_S3_ENV): reads and writes, pagination, conditional-write races,
batch deletes, and the typed errors of a missing bucket, bad credentials and an
endpoint that drops, resets or never answers (through tests/replica/faultproxy.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from journal.errors import InvalidInputError, JournalError, ReplicaError, ReplicaUnavailableError
from journal.replica.objects import ObjectInfo, ObjectStore, open_object_store
from journal.replica.target import ReplicaTarget, key, parse_replica_url

from .conftest import S3Server
from .faultproxy import BLACKHOLE, DROP, PASS, RESET, FaultProxy

# -- parsing (no server) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://bkt", "bkt", ""),
        ("s3://bkt/", "bkt", ""),
        ("s3://bkt/a", "bkt", "a"),
        ("s3://my.bucket-1/a/b/", "my.bucket-1", "a/b"),
        ("S3://bkt/x y", "bkt", "x y"),
    ],
)
def test_a_replica_url_gives_bucket_and_prefix(url: str, bucket: str, prefix: str) -> None:
    target = parse_replica_url(url, environ={})
    assert (target.bucket, target.prefix) == (bucket, prefix)
    assert target.endpoint_url is None and target.access_key_id is None


@pytest.mark.parametrize(
    "url",
    [
        "http://bkt/x",
        "s3:/bkt/x",
        "s3:///x",
        "s3://Bkt/x",
        "s3://ab/x",
        "s3://a..b/x",
        "s3://-bkt/x",
        "s3://10.0.0.1/x",
        "s3://bkt/a/../b",
        "s3://bkt/..",
        "s3://bkt/a//b",
        "s3://bkt/./a",
        "s3://bkt/x?versionId=1",
        "s3://key:secret@bkt/x",
        "s3://bkt:9000/x",
        "s3://bkt/a\x00b",
        "",
    ],
)
def test_a_bad_replica_url_is_refused_with_the_url_named(url: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_replica_url(url, environ={})
    assert repr(url) in str(info.value) or url in str(info.value)


def test_the_environment_gives_endpoint_credentials_region_and_profile() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://a.example:9000/",
        "AWS_ENDPOINT_URL_S3": "http://s3.example:9001",
        "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SK",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_PROFILE": "prof",
    }
    target = parse_replica_url("s3://bkt/p", environ=env)
    assert target.endpoint_url == "http://s3.example:9001"  # the S3-specific one wins
    assert (target.access_key_id, target.secret_access_key) == ("AK", "SK")
    assert (target.region, target.profile) == ("eu-west-1", "prof")
    assert "SK" not in repr(target)
    env2 = {
        "AWS_ENDPOINT_URL": "http://a.example:9000/",
        "AWS_REGION": "ap-south-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    target2 = parse_replica_url("s3://bkt", environ=env2)
    assert (target2.endpoint_url, target2.region) == ("http://a.example:9000", "ap-south-1")


@pytest.mark.parametrize(
    "env",
    [
        {"AWS_ACCESS_KEY_ID": "AK"},
        {"AWS_SECRET_ACCESS_KEY": "SK"},
        {"AWS_ENDPOINT_URL": "ftp://host"},
        {"AWS_ENDPOINT_URL": "http://host:port"},
        {"AWS_ENDPOINT_URL": "localhost:9000"},
    ],
)
def test_bad_s3_settings_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(InvalidInputError):
        parse_replica_url("s3://bkt/p", environ=env)


def test_keys_join_the_prefix_and_parts() -> None:
    assert key(ReplicaTarget("bkt", ""), "sessions/d", "chunks/") == "sessions/d/chunks/"
    assert key(ReplicaTarget("bkt", "a/b"), "heads", "d") == "a/b/heads/d"
    for parts in (("",), ("/x",), ("a/", "b")):
        with pytest.raises(InvalidInputError):
            key(ReplicaTarget("bkt", "a"), *parts)


def test_the_core_does_not_import_boto3(tmp_path: Any) -> None:
    code = (
        "import sys, journal\n"
        f"s = journal.open({str(tmp_path / 'root')!r})\n"
        "s.close()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('boto3', 'botocore') or m.startswith('journal.replica'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


def test_without_boto3_opening_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` raises ImportError
    with pytest.raises(ReplicaError, match=r"pip install 'journal\[s3\]'"):
        open_object_store(ReplicaTarget("bkt", "p", endpoint_url="http://127.0.0.1:1"))


# -- against the server ------------------------------------------------------------------


def _k(target: ReplicaTarget, name: str) -> str:
    return key(target, name)


def test_put_get_and_list_round_trip(
    object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    k = _k(replica_target, "a/one")
    assert object_store.get(k) is None
    etag = object_store.put(k, b"hello")
    assert etag and '"' not in etag
    assert object_store.get(k) == (b"hello", etag)
    etag2 = object_store.put(k, b"")  # unconditional PUT replaces, empty bodies are fine
    assert etag2 != etag
    assert object_store.get(k) == (b"", etag2)
    [info] = object_store.list(replica_target.prefix + "/a/")
    assert isinstance(info, ObjectInfo)
    assert (info.key, info.size, info.etag) == (k, 0, etag2)
    assert info.last_modified_ms > 1_600_000_000_000


def _put_many(store: ObjectStore, keys: list[str]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: store.put(k, k.encode()), keys))


def test_list_pages_in_key_order_and_starts_after(
    s3_server: S3Server, replica_target: ReplicaTarget, fault_proxy: FaultProxy
) -> None:
    store = open_object_store(dataclasses.replace(replica_target, endpoint_url=fault_proxy.url))
    try:
        names = [_k(replica_target, f"chunks/{n:020d}") for n in range(23)]
        _put_many(store, names)
        store.put(_k(replica_target, "chunksX"), b"other")  # shares the string prefix only
        store.put(_k(replica_target, "heads/x"), b"other")
        fault_proxy.reset_counters()
        listed = list(store.list(_k(replica_target, "chunks/"), page_size=5))
        assert [i.key for i in listed] == names
        assert [i.size for i in listed] == [len(n) for n in names]
        assert fault_proxy.requests == 5  # 23 keys in pages of 5
        after = list(store.list(_k(replica_target, "chunks/"), start_after=names[9], page_size=4))
        assert [i.key for i in after] == names[10:]
        whole = [i.key for i in store.list(replica_target.prefix + "/")]
        assert whole == sorted(whole) and len(whole) == 25
        assert list(store.list(_k(replica_target, "nothing/"))) == []
        with pytest.raises(InvalidInputError):
            list(store.list("", page_size=0))
    finally:
        store.close()


def test_put_if_absent_has_exactly_one_winner(
    object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    writers = 16
    for round_ in range(3):
        k = _k(replica_target, f"slot/{round_}")
        barrier = threading.Barrier(writers)

        def claim(i: int, k: str = k, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return object_store.put_if_absent(k, f"writer {i}".encode())

        with ThreadPoolExecutor(writers) as pool:
            results = list(pool.map(claim, range(writers)))
        assert results.count(True) == 1, results
        got = object_store.get(k)
        assert got is not None and got[0] == f"writer {results.index(True)}".encode()
        assert object_store.put_if_absent(k, b"late") is False


def test_put_if_match_loses_no_update(
    object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    k = _k(replica_target, "lease")
    assert object_store.put_if_absent(k, json.dumps({"n": 0, "by": []}).encode())
    workers, each = 8, 5

    def bump(i: int) -> int:
        lost = 0
        for j in range(each):
            while True:
                got = object_store.get(k)
                assert got is not None
                value = json.loads(got[0])
                value["n"] += 1
                value["by"].append(f"{i}.{j}")
                if object_store.put_if_match(k, json.dumps(value).encode(), got[1]) is not None:
                    break
                lost += 1
        return lost

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(bump, range(workers)))
    got = object_store.get(k)
    assert got is not None
    final = json.loads(got[0])
    assert final["n"] == workers * each
    assert sorted(final["by"]) == sorted(f"{i}.{j}" for i in range(workers) for j in range(each))


def test_put_if_match_answers_none_for_a_stale_or_absent_key(
    object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    k = _k(replica_target, "cas")
    first = object_store.put(k, b"v1")
    second = object_store.put_if_match(k, b"v2", first)
    assert second is not None and second != first
    assert object_store.put_if_match(k, b"v3", first) is None  # stale
    assert object_store.get(k) == (b"v2", second)
    third = object_store.put_if_match(k, b"v3", f'"{second}"')  # a quoted ETag works too
    assert third is not None and object_store.get(k) == (b"v3", third)
    assert object_store.put_if_match(_k(replica_target, "absent"), b"x", third) is None
    assert object_store.get(_k(replica_target, "absent")) is None


def test_delete_removes_a_batch_and_ignores_absent_keys(
    object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    names = [_k(replica_target, f"d/{n:03d}") for n in range(30)]
    _put_many(object_store, names)
    object_store.delete([*names[:20], _k(replica_target, "d/never"), names[0]])
    assert [i.key for i in object_store.list(_k(replica_target, "d/"))] == names[20:]
    object_store.delete([])
    object_store.delete(names)
    assert list(object_store.list(_k(replica_target, "d/"))) == []


# -- errors --------------------------------------------------------------------------------


def _calls(store: ObjectStore) -> dict[str, Callable[[], object]]:
    return {
        "get": lambda: store.get("p/k"),
        "put": lambda: store.put("p/k", b"x"),
        "put_if_absent": lambda: store.put_if_absent("p/k", b"x"),
        "list": lambda: list(store.list("p/")),
        "delete": lambda: store.delete(["p/k"]),
        "check_bucket": store.check_bucket,
    }


def _assert_journal_error(exc: BaseException) -> None:
    assert isinstance(exc, JournalError)
    assert not type(exc).__module__.startswith(("botocore", "boto3", "urllib3"))


def test_a_missing_bucket_is_a_replica_error_naming_it(s3_server: S3Server) -> None:
    store = open_object_store(s3_server.target("jt-no-such-bucket-here"))
    try:
        # put_if_match is left out: SeaweedFS answers 412 (None) for a missing bucket.
        for name, call in _calls(store).items():
            with pytest.raises(ReplicaError) as info:
                call()
            _assert_journal_error(info.value)
            assert not isinstance(info.value, ReplicaUnavailableError), name
            assert "jt-no-such-bucket-here" in str(info.value), name
            assert "does not exist" in str(info.value), name
            assert s3_server.endpoint_url in str(info.value), name
    finally:
        store.close()


def test_wrong_credentials_are_a_replica_error(s3_server: S3Server, s3_bucket: str) -> None:
    bucket = parse_replica_url(s3_bucket).bucket
    store = open_object_store(s3_server.target(bucket, secret_access_key="not-the-secret"))
    try:
        for name, call in _calls(store).items():
            with pytest.raises(ReplicaError) as info:
                call()
            _assert_journal_error(info.value)
            assert not isinstance(info.value, ReplicaUnavailableError), name
            assert bucket in str(info.value), name
    finally:
        store.close()


def test_a_request_botocore_refuses_is_a_replica_error(object_store: ObjectStore) -> None:
    with pytest.raises(ReplicaError) as info:
        object_store.put("", b"x")  # an empty key: botocore's own validation refuses it
    _assert_journal_error(info.value)
    with pytest.raises(InvalidInputError):
        object_store.put("p/k", "text")  # type: ignore[arg-type]


def _proxied(replica_target: ReplicaTarget, proxy: FaultProxy, **options: Any) -> ObjectStore:
    return open_object_store(dataclasses.replace(replica_target, endpoint_url=proxy.url), **options)


def test_an_endpoint_that_drops_connections_is_unavailable_after_the_retries(
    replica_target: ReplicaTarget, fault_proxy: FaultProxy
) -> None:
    store = _proxied(replica_target, fault_proxy, max_attempts=3, connect_timeout=1)
    try:
        fault_proxy.set_mode(DROP)
        for name, call in _calls(store).items():
            fault_proxy.reset_counters()
            with pytest.raises(ReplicaUnavailableError) as info:
                call()
            _assert_journal_error(info.value)
            assert fault_proxy.connections == 3, name  # bounded: max_attempts tries, no more
            assert fault_proxy.url in str(info.value) and replica_target.bucket in str(info.value)
        with pytest.raises(ReplicaUnavailableError, match=r"key 'p/k'"):
            store.put_if_match("p/k", b"x", "0123")
        fault_proxy.set_mode(PASS)
        assert store.put_if_absent(_k(replica_target, "after"), b"ok") is True
    finally:
        store.close()


def test_a_reset_of_pooled_connections_is_retried(
    object_store: ObjectStore, replica_target: ReplicaTarget, fault_proxy: FaultProxy
) -> None:
    store = _proxied(replica_target, fault_proxy)
    try:
        k = _k(replica_target, "r")
        etag = store.put(k, b"before")  # leaves a pooled keep-alive connection
        fault_proxy.set_mode(RESET)
        fault_proxy.set_mode(PASS)
        fault_proxy.reset_counters()
        assert store.get(k) == (b"before", etag)  # the dead pooled socket, then a retry
        assert fault_proxy.connections >= 1
        assert object_store.get(k) == (b"before", etag)
    finally:
        store.close()


def test_a_black_hole_is_unavailable_after_the_read_timeouts(
    replica_target: ReplicaTarget, fault_proxy: FaultProxy
) -> None:
    store = _proxied(replica_target, fault_proxy, max_attempts=2, read_timeout=0.5)
    try:
        fault_proxy.set_mode(BLACKHOLE)
        with pytest.raises(ReplicaUnavailableError) as info:
            store.get(_k(replica_target, "bh"))
        _assert_journal_error(info.value)
        assert fault_proxy.connections == 2
        assert "bh" in str(info.value) and fault_proxy.url in str(info.value)
    finally:
        fault_proxy.set_mode(PASS)
        store.close()


def test_a_slow_endpoint_still_answers(
    replica_target: ReplicaTarget, fault_proxy: FaultProxy
) -> None:
    store = _proxied(replica_target, fault_proxy)
    try:
        fault_proxy.set_mode(PASS, delay_ms=50)
        k = _k(replica_target, "slow")
        assert store.put_if_absent(k, b"x" * 100_000)
        got = store.get(k)
        assert got is not None and got[0] == b"x" * 100_000
        assert fault_proxy.requests == 2
    finally:
        store.close()


def test_nothing_of_botocore_escapes_a_dead_endpoint() -> None:
    target = ReplicaTarget(
        "bkt",
        "p",
        endpoint_url="http://127.0.0.1:9",
        access_key_id="a",
        secret_access_key="b",
        region="us-east-1",
    )
    store = open_object_store(target, max_attempts=1, connect_timeout=0.5)
    try:
        for call in [
            *_calls(store).values(),
            lambda: store.put_if_match("p/k", b"", "e"),
            store.create_bucket,
        ]:
            with pytest.raises(ReplicaUnavailableError) as info:
                call()
            _assert_journal_error(info.value)
    finally:
        store.close()
