"""The viewer in a real browser: headless Chromium from Debian's packages
(/usr/bin/chromium, driven through /usr/bin/chromedriver by Selenium; nothing is
downloaded). `scripts/test.sh` installs both when it runs as root with apt-get;
elsewhere these tests skip, saying what is missing.

The viewer runs as its own process (`python -m journal.viewer`) on the store of
`test_viewer_fixtures.build_store`: forks, a long session, hostile markup, two
damaged sessions. The tests load every page, click through the timeline, its
paging and its keys, a diff and the fork tree, follow a live tail while a writer
process commits, and take screenshots into the test's output directory
(`<tmp_path>/screenshots/`, or $JOURNAL_VIEWER_SHOTS when set).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from test_viewer_fixtures import (
    ESCAPE_ID,
    MAIN_SAVES,
    build_store,
    serving_process,
    stop_writer,
    writer_process,
)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def _missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

if _missing() is None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support.ui import WebDriverWait

WAIT = 30  # seconds a page or a live row may take on a loaded machine


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("viewer-browser") / "store"
    build_store(root)
    return root


@pytest.fixture(scope="module")
def base(store_root: Path) -> Iterator[str]:
    with serving_process(store_root) as url:
        yield url.rstrip("/")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="viewer-chromium-", dir=tmp_path_factory.getbasetemp())
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}", "--window-size=1366,900"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("JOURNAL_VIEWER_SHOTS") or tmp_path / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def shoot(driver: WebDriver, shots: Path, name: str) -> Path:
    path = shots / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    assert path.stat().st_size > 10_000  # a page, not an empty image
    return path


def load(driver: WebDriver, url: str) -> None:
    driver.get(url)
    WebDriverWait(driver, WAIT).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )
    assert "Internal" not in driver.title


def texts(elements: list[WebElement]) -> list[str]:
    return [e.text for e in elements]


def key(driver: WebDriver, keys: str) -> None:
    driver.find_element(By.TAG_NAME, "body").send_keys(keys)


def no_horizontal_scroll(driver: WebDriver) -> None:
    wide = driver.execute_script("return document.documentElement.scrollWidth")
    inner = driver.execute_script("return window.innerWidth")
    assert wide <= inner, f"the page is {wide}px wide in a {inner}px window"


# ------------------------------------------------------------------ pages
def test_the_sessions_page_lists_marks_searches_and_pages(
    browser: WebDriver, base: str, shots: Path
) -> None:
    load(browser, base + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.list tbody tr")
    assert len(rows) == 14
    gone = next(r for r in rows if "gone" in r.text.split())
    assert gone.find_element(By.CSS_SELECTOR, ".badge.bad").text == "damaged"
    no_horizontal_scroll(browser)
    shoot(browser, shots, "sessions")

    box = browser.find_element(By.CSS_SELECTOR, "input[type=search]")
    box.send_keys("bulk task 4", Keys.ENTER)
    WebDriverWait(browser, WAIT).until(lambda d: "q=bulk" in d.current_url)
    found = browser.find_elements(By.CSS_SELECTOR, "table.list tbody tr a.sid")
    assert texts(found) == ["bulk-4"]

    load(browser, base + "/?owner=bob&limit=4")
    seen: list[str] = []
    while True:
        seen += texts(
            browser.find_elements(By.CSS_SELECTOR, "table.list tbody tr td:nth-child(2) a.sid")
        )
        older = browser.find_elements(By.CSS_SELECTOR, '[data-page="next"]')
        if not older:
            break
        older[0].click()
        WebDriverWait(browser, WAIT).until(lambda d: "before=" in d.current_url)
    assert sorted(seen) == [f"bulk-{i}" for i in range(6)] and len(seen) == 6


def test_overview_then_the_timeline_by_keys_and_paging(
    browser: WebDriver, base: str, shots: Path
) -> None:
    load(browser, base + "/s/main")
    facts = browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    assert "alice" in facts and f"{MAIN_SAVES * 22} events" in facts and "main-fork" in facts
    shoot(browser, shots, "overview")
    browser.find_element(By.LINK_TEXT, "timeline").click()
    WebDriverWait(browser, WAIT).until(lambda d: d.current_url.endswith("/timeline"))
    first = [
        int(r.get_attribute("data-seq")) for r in browser.find_elements(By.CSS_SELECTOR, "tr.ev")
    ]
    assert first == list(range(MAIN_SAVES * 22, MAIN_SAVES * 22 - 50, -1))

    key(browser, "jjj")
    selected = browser.find_element(By.CSS_SELECTOR, "tr.ev.sel")
    assert int(selected.get_attribute("data-seq")) == first[2]
    key(browser, "k")
    selected = browser.find_element(By.CSS_SELECTOR, "tr.ev.sel")
    assert int(selected.get_attribute("data-seq")) == first[1]
    key(browser, Keys.ENTER)
    raw = selected.find_element(By.CSS_SELECTOR, "details.raw")
    assert raw.get_attribute("open") is not None
    assert f'"sequence": {first[1]}' in raw.find_element(By.TAG_NAME, "pre").text
    shoot(browser, shots, "timeline")

    key(browser, "n")  # the older page
    WebDriverWait(browser, WAIT).until(lambda d: "before=" in d.current_url)
    second = [
        int(r.get_attribute("data-seq")) for r in browser.find_elements(By.CSS_SELECTOR, "tr.ev")
    ]
    assert second[0] == first[-1] - 1 and len(second) == 50
    browser.find_element(By.CSS_SELECTOR, '[data-page="first"]').click()
    WebDriverWait(browser, WAIT).until(lambda d: "before=" not in d.current_url)

    chip = next(
        c for c in browser.find_elements(By.CSS_SELECTOR, ".chips a.chip") if c.text == "warning"
    )
    chip.click()
    WebDriverWait(browser, WAIT).until(lambda d: "type=warning" in d.current_url)
    kinds = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "tr.ev .type")}
    assert kinds == {"warning"}


def test_the_conversation_pairs_calls_with_results(
    browser: WebDriver, base: str, shots: Path
) -> None:
    load(browser, base + "/s/main/conversation?limit=3")
    items = browser.find_elements(By.CSS_SELECTOR, ".convo > article.msg-item")
    roles = [i.find_element(By.CSS_SELECTOR, ".role").text.lower() for i in items]
    assert roles == ["user", "assistant", "assistant"] * 3
    call = items[1].find_element(By.CSS_SELECTOR, ".call")
    assert (
        "shell" in call.text
        and f"output of ls {MAIN_SAVES - 3}" in call.find_element(By.CSS_SELECTOR, ".result").text
    )
    key(browser, "jj")  # the assistant's call; Enter opens its own raw JSON
    key(browser, Keys.ENTER)
    own = items[1].find_element(By.XPATH, "./details[contains(@class, 'raw')]")
    assert own.get_attribute("open") is not None and '"function_call"' in own.text
    result_raw = items[1].find_element(By.CSS_SELECTOR, ".result details.raw")
    assert result_raw.get_attribute("open") is None
    summary = items[0].find_element(By.CSS_SELECTOR, "details.raw > summary")
    summary.click()
    assert '"input_text"' in items[0].find_element(By.CSS_SELECTOR, "details.raw pre").text
    shoot(browser, shots, "conversation")
    load(browser, base + "/s/conv-1/conversation")
    text = browser.find_element(By.CSS_SELECTOR, ".convo").text
    assert "Golden Gate" in text and "lookup" in text and "San Francisco." in text


def test_a_checkpoint_its_neighbour_and_a_diff(browser: WebDriver, base: str, shots: Path) -> None:
    load(browser, base + "/s/main/checkpoint?at=4")
    assert "4 of 11" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    browser.find_element(By.CSS_SELECTOR, '[data-page="prev"]').click()
    WebDriverWait(browser, WAIT).until(lambda d: d.current_url.endswith("at=3"))
    assert "16 items" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text  # 4 a save
    browser.find_element(By.PARTIAL_LINK_TEXT, "diff 2 → 3").click()
    WebDriverWait(browser, WAIT).until(lambda d: "/diff" in d.current_url)
    added = browser.find_elements(By.CSS_SELECTOR, ".side.add article.msg-item")
    assert len(added) == 3 and browser.find_elements(By.CSS_SELECTOR, ".side.del article") == []
    assert "question 3" in added[0].text

    load(browser, base + "/s/main-fork")
    browser.find_element(By.PARTIAL_LINK_TEXT, "diff with the parent").click()
    WebDriverWait(browser, WAIT).until(lambda d: "/diff" in d.current_url)
    labels = browser.find_element(By.CSS_SELECTOR, ".diff-labels").text
    assert "main@5" in labels and "main-fork@1" in labels
    assert "retry differently" in browser.find_element(By.CSS_SELECTOR, ".side.add").text
    shoot(browser, shots, "diff")


def test_the_fork_tree_links_every_node(browser: WebDriver, base: str, shots: Path) -> None:
    load(browser, base + "/s/main-fork/tree")
    nodes = browser.find_elements(By.CSS_SELECTOR, "ul.tree a.sid")
    assert texts(nodes) == ["main", "main-fork", "main-fork-2"]
    branches = texts(browser.find_elements(By.CSS_SELECTOR, ".branch"))
    assert branches == ["↳ forked at 5", "↳ forked at 1"]
    assert (
        browser.find_element(By.CSS_SELECTOR, "li.node.current > .node-line a.sid").text
        == "main-fork"
    )
    shoot(browser, shots, "tree")
    nodes[2].click()
    WebDriverWait(browser, WAIT).until(lambda d: d.current_url.endswith("/s/main-fork-2"))
    assert browser.find_element(By.CSS_SELECTOR, "h1").text == "main-fork-2"


def test_verify_on_demand_names_file_and_offset(browser: WebDriver, base: str, shots: Path) -> None:
    load(browser, base + "/s/flipped/verify")
    assert browser.find_elements(By.CSS_SELECTOR, "table.findings") == []
    browser.find_element(By.LINK_TEXT, "Run verify").click()
    WebDriverWait(browser, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, "table.findings"))
    row = browser.find_element(By.CSS_SELECTOR, "table.findings tbody tr")
    cells = texts(row.find_elements(By.TAG_NAME, "td"))
    assert cells[0] == "data" and cells[2].endswith(".seg") and cells[3].isdigit()
    assert "FAILED" in browser.find_element(By.CSS_SELECTOR, ".banner.damage").text
    shoot(browser, shots, "verify")
    load(browser, base + "/?owner=carol")
    marks = {
        r.find_element(By.CSS_SELECTOR, "a.sid").text: r.find_elements(
            By.CSS_SELECTOR, ".badge.bad"
        )
        for r in browser.find_elements(By.CSS_SELECTOR, "table.list tbody tr")
    }
    assert marks["flipped"] and marks["gone"]  # verified damaged; unreadable


def test_hostile_content_stays_text(browser: WebDriver, base: str, shots: Path) -> None:
    for path in (
        "/?owner=mallory",
        "/s/hostile",
        "/s/hostile/conversation",
        "/s/hostile/timeline",
        "/s/main/state",
        f"/s/{quote(ESCAPE_ID, safe='')}",
    ):
        load(browser, base + path)
        assert browser.execute_script("return window.__pwned === undefined")
        assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
        scripts = browser.execute_script("return Array.from(document.scripts).map(s => s.src)")
        assert scripts == [base + "/static/viewer.js"], scripts
    assert "<script>window.__pwned=1</script>" in browser.find_element(By.TAG_NAME, "main").text
    load(browser, base + "/?owner=mallory")
    browser.find_element(By.LINK_TEXT, ESCAPE_ID).click()
    WebDriverWait(browser, WAIT).until(lambda d: "%2F" in d.current_url)
    assert browser.find_element(By.CSS_SELECTOR, "h1").text == ESCAPE_ID
    shoot(browser, shots, "hostile")


def test_a_live_tail_follows_a_writer_process(
    browser: WebDriver, base: str, store_root: Path, shots: Path
) -> None:
    load(browser, base + "/s/bulk-5/timeline")
    assert browser.find_elements(By.CSS_SELECTOR, "tr.ev") == []
    key(browser, "f")
    WebDriverWait(browser, WAIT).until(
        lambda d: "waiting" in d.find_element(By.CSS_SELECTOR, ".live-status").text
    )
    writer = writer_process(store_root, "bulk-5", 12)
    try:
        WebDriverWait(browser, WAIT).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.ev")) == 12
        )
        shown = texts(browser.find_elements(By.CSS_SELECTOR, "tr.ev .msg"))
        assert shown == [f"live-{i}" for i in range(11, -1, -1)]  # newest on top
        assert "12 new events" in browser.find_element(By.CSS_SELECTOR, ".live-status").text
        shoot(browser, shots, "live")
    finally:
        stop_writer(writer)
    browser.find_element(By.CSS_SELECTOR, "[data-follow]").click()
    assert "stopped" in browser.find_element(By.CSS_SELECTOR, ".live-status").text


def test_dark_and_narrow(browser: WebDriver, base: str, shots: Path) -> None:
    load(browser, base + "/s/main/timeline")
    light = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    try:
        dark = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert dark != light
        shoot(browser, shots, "timeline-dark")
        browser.set_window_size(1024, 768)
        for path in ("/", "/s/main", "/s/main/conversation", "/diff?a=main&at_a=2&at_b=5"):
            load(browser, base + path)
            no_horizontal_scroll(browser)
        shoot(browser, shots, "diff-dark-1024")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        browser.set_window_size(1366, 900)


def test_every_page_answers(browser: WebDriver, base: str) -> None:
    paths: list[str] = ["/", "/api"]
    for tab in (
        "",
        "/timeline",
        "/conversation",
        "/executions",
        "/checkpoint",
        "/state",
        "/tree",
        "/verify",
    ):
        paths.append("/s/main" + tab)
    paths += ["/s/gone", "/s/nope"]
    for path in paths:
        browser.get(base + path)
        title: Any = browser.title
        if path == "/s/nope":
            assert title.startswith("Not Found")
        elif path == "/s/gone":
            assert "damaged" in browser.find_element(By.TAG_NAME, "main").text.lower() or title
        else:
            assert "error" not in title.lower(), (path, title)


def test_a_4_kib_id_keeps_the_list_readable(
    tmp_path: Path, browser: WebDriver, shots: Path
) -> None:
    """A session id of 4 KiB (no break in it) is cut in its row: the other columns
    stay in a laptop-wide window, and the rows stay one line high."""
    import journal

    root = tmp_path / "long-id"
    store = journal.open(root, durability="os")
    try:
        for sid in ("x" * 4096, "short"):
            cp = journal.Checkpoint.empty(sid, owner_id="o")
            cp.first_user_message = f"the first message of {sid[:5]}"
            store.save(cp)
    finally:
        store.close()
    browser.set_window_size(1024, 768)
    try:
        with serving_process(root) as url:
            load(browser, url)
            shoot(browser, shots, "long-id-list")
            width = browser.execute_script("return window.innerWidth")
            for cell in browser.find_elements(By.CSS_SELECTOR, "table.list tbody td:last-child"):
                box = cell.rect
                assert box["x"] + 40 < width, f"the last column starts at {box['x']} of {width}"
            rows = browser.find_elements(By.CSS_SELECTOR, "table.list tbody tr")
            assert len(rows) == 2
            assert max(r.rect["height"] for r in rows) < 3 * min(r.rect["height"] for r in rows)
            link = browser.find_element(By.CSS_SELECTOR, "table.list a.sid[title^='xxxx']")
            assert link.get_attribute("title") == "x" * 4096
    finally:
        browser.set_window_size(1366, 900)
