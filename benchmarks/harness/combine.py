"""Several runs' `--json` files as one Markdown table: per figure the median over the runs'
medians with their min-max, per ratio the median of the runs' ratios with their min-max.

    python benchmarks/harness/combine.py run1.json run2.json ... > table.md

Rows are matched by section key and label (and its occurrence); a row missing from some
runs says in how many it is.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.report import COLUMNS, OTHERS, Unit, fmt_ratio, fmt_value


def spread(values: Sequence[float], unit: Unit | None) -> str:
    if not values:
        return ""
    mid = statistics.median(values)
    text = fmt_value(mid, unit) if unit else fmt_ratio(mid)
    if len(values) > 1:
        low, high = min(values), max(values)
        if unit:
            text += f" ({fmt_value(low, unit)}-{fmt_value(high, unit)})"
        else:
            text += f" ({fmt_ratio(low)[:-1]}-{fmt_ratio(high)})"
    return text


def combine(paths: Sequence[Path]) -> str:
    runs = [json.loads(path.read_text()) for path in paths]
    order: list[tuple[str, str, int]] = []
    rows: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    titles: dict[str, str] = {}
    for run in runs:
        for section in run["sections"]:
            name = section.get("key", section["title"])
            titles[name] = section["title"]
            seen: dict[str, int] = {}
            for row in section["rows"]:
                # a label may repeat within a section (the bytes workload's sub-rows)
                seen[row["label"]] = seen.get(row["label"], 0) + 1
                key = (name, row["label"], seen[row["label"]])
                if key not in rows:
                    order.append(key)
                    rows[key] = []
                rows[key].append(row)
    lines = [
        f"| workload ({len(runs)} runs) | journal | mobius | tuned | floor | vs mobius | "
        "vs tuned | vs floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    title = None
    for key in order:
        if key[0] != title:
            title = key[0]
            lines.append(f"| **{titles[title]}** | | | | | | | |")
        found = rows[key]
        first = found[0]
        if first.get("text"):
            lines.append(f"| {first['label'].strip()} | {first['text']} | | | | | | |")
            continue
        unit: Unit = first["unit"]
        cells = []
        for side in COLUMNS:
            values = [r["medians"][side] for r in found if r["medians"].get(side) is not None]
            cells.append(spread(values, unit))
        for other in OTHERS:
            values = [
                r["ratios"][other]["median"]
                for r in found
                if other in r.get("ratios", {}) and r["ratios"][other]["median"] is not None
            ]
            cells.append(spread(values, None))
        label = first["label"].strip()
        if len(found) < len(runs):
            label += f" ({len(found)} of {len(runs)} runs)"
        lines.append("| " + " | ".join([label.replace("|", "/"), *cells]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(combine([Path(arg) for arg in sys.argv[1:]]))
