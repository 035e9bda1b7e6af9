#!/usr/bin/env bash
# Install journal with its test extras into .venv and run the whole suite:
# lint, types, then every test (crash, fault, corruption and concurrency tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,langgraph,openai-agents,conformance]'
.venv/bin/ruff check journal tests benchmarks
.venv/bin/mypy journal
.venv/bin/python -m pytest -q
