"""The catalog's children index and directory names stay equal to what its
summaries imply, through random forks, deletes, re-creations under another parent
and saves from two store objects, then reopen (snapshot), a rebuilt catalog and a
read-only open; child_sessions agrees with each session's own summary throughout."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

# reaches inside: the catalog's children index and directory names are what it checks
import journal
from journal import Checkpoint
from journal.inspect import dir_name


def _expected(cat: journal.catalog.Catalog) -> tuple[dict[str, set[str]], set[str]]:
    kids: dict[str, set[str]] = {}
    summaries = cat.listed()
    for sid, s in summaries.items():
        if s.parent_session_id is not None:
            kids.setdefault(s.parent_session_id, set()).add(sid)
    return kids, {dir_name(sid) for sid in summaries}


def _check(store: journal.Store) -> None:
    store.catalog.refresh()
    kids, names = _expected(store.catalog)
    parents = set(kids) | {f"s{i}" for i in range(12)}
    assert {
        p: set(store.catalog.child_ids(p)) for p in parents if store.catalog.child_ids(p)
    } == kids
    assert {p: set(c) for p, c in store.catalog.children_of().items()} == kids
    assert sorted(store.catalog.listed_dir_names()) == sorted(names)
    for name in names:
        assert store.catalog.listed_id_of_dir(name) is not None
    assert store.catalog.unlisted(names) == set()
    assert store.catalog.unlisted([*names, "aa-stray", "zz-stray"]) == {"aa-stray", "zz-stray"}


def test_children_index_matches_summaries(tmp_path: Path) -> None:
    rng = random.Random(7)
    root = tmp_path / "s"
    a = journal.open(root, durability="os")
    b = journal.open(root, durability="os")
    ids = [f"s{i}" for i in range(12)]
    for step in range(250):
        w = a if rng.random() < 0.5 else b
        sid = rng.choice(ids)
        existing = [s for s in ids if w.load(s) is not None]
        op = rng.random()
        if op < 0.3 and w.load(sid) is None:
            w.save(Checkpoint.empty(sid, owner_id="o"))
        elif op < 0.65 and existing and w.load(sid) is None:
            w.fork(rng.choice(existing), 0, Checkpoint.empty(sid, owner_id="o"))
        elif op < 0.85 and existing:
            w.delete_sessions([rng.choice(existing)])
        elif existing:
            x = rng.choice(existing)
            cp = w.load(x)
            assert cp is not None
            cp.sequence += 1
            w.save(cp)
        if step % 25 == 24:
            w.catalog.rewrite_base()  # a new base: the rest of the steps merge over it
        _check(a)
        _check(b)
        for st in (a, b):
            for p in ids:
                listed = {k.session_id for k in st.child_sessions(p)}
                truth = {
                    c
                    for c in ids
                    if (s := st.session_summary(c)) is not None and s.parent_session_id == p
                }
                assert listed == truth, (step, p, listed, truth)
    a.close()
    b.close()
    c = journal.open(root, durability="os")  # snapshot / log replay
    _check(c)
    c.close()
    shutil.rmtree(root / "catalog")  # rebuilt from sessions/
    d = journal.open(root, durability="os")
    _check(d)
    d.close()
    e = journal.open(root, read_only=True)
    _check(e)
    e.close()
