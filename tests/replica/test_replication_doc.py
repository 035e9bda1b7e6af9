"""docs/replication.md's Python examples run as written, against a real S3 server
(the bucket its examples name is the test's own)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import journal

DOC = (Path(__file__).resolve().parent.parent.parent / "docs" / "replication.md").read_text()


def test_the_examples_run(tmp_path: Path, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        assert "s3://my-bucket/agents" in code
        exec(
            compile(code.replace("s3://my-bucket/agents", s3_bucket), "replication.md", "exec"), {}
        )
    # What the examples say happened did: B's append is there, A's zombie is not.
    with journal.open(tmp_path / "fresh", replica=s3_bucket) as fresh:
        page = fresh.event_page("conversation-42", journal.EventPageRequest(limit=10))
        texts = [e.event.msg["text"] for e in page.events]
    assert texts == ["on B", "hello"]
