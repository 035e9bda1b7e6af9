#!/usr/bin/env bash
# Install journal with its test extras into .venv and run the whole suite:
# lint, types, then every test (crash, fault, corruption and concurrency tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
# The power-loss tests (tests/test_powerloss_*.py) mount a FUSE file system: fusepy
# loads libfuse 2, and unmounting takes fusermount (from fuse3). Installed only when
# missing, and only as root (CI is root); elsewhere those tests skip.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    need=""
    ldconfig -p | grep 'libfuse\.so\.2 ' >/dev/null || need="libfuse2"
    command -v fusermount3 >/dev/null 2>&1 || need="$need fuse3"
    if [ -n "$need" ]; then
        apt-get update -qq >/dev/null
        # $need is a list of package names (unquoted on purpose); Debian 13 calls
        # libfuse 2 libfuse2t64.
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null \
            || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                ${need/libfuse2/libfuse2t64} >/dev/null
    fi
    # The viewer's browser tests (tests/test_viewer_browser.py) drive Debian's headless
    # Chromium through its chromedriver; nothing is downloaded by the tests themselves.
    if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,langgraph,openai-agents,conformance,pydantic-ai,adk,claude-agent-sdk,langgraph-server,s3]'
.venv/bin/ruff check journal tests benchmarks
.venv/bin/mypy journal
.venv/bin/python -m pytest -q
