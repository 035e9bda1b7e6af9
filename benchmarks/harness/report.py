"""Rows of figures, their ratios, and the printed table.

A `Row` holds the samples of each store ("journal", "mobius", "tuned") and, where one was
measured alongside, of the floor ("floor": the bare system calls, no store). Its ratios compare
journal with each of the others, oriented so that > 1 means journal is better: journal/other
for throughput, other/journal for time, bytes and memory. A ratio's range is its min and max
over the paired repetitions (they ran back to back, alternating).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .config import KIB, MIB

Better = Literal["higher", "lower"]
Unit = Literal["ops/s", "s", "B", "x"]
COLUMNS = ("journal", "mobius", "tuned", "floor")
OTHERS = ("mobius", "tuned", "floor")


@dataclass
class Row:
    label: str
    unit: Unit
    samples: dict[str, list[float]] = field(default_factory=dict)
    better: Better = "higher"
    note: str = ""
    ratio: bool = True
    text: str = ""  # a row without figures ("n/a (not implemented)", an error)

    def __post_init__(self) -> None:
        self.samples = {k: list(v) for k, v in self.samples.items() if k in COLUMNS and v}

    @classmethod
    def one(
        cls,
        label: str,
        unit: Unit,
        values: Sequence[float],
        *,
        better: Better = "higher",
        note: str = "",
    ) -> Row:
        """A row of journal-column figures only (a floor, a growth factor): no ratio."""
        return cls(label, unit, {"journal": list(values)}, better, note, ratio=False)

    def median(self, side: str) -> float | None:
        samples = self.samples.get(side)
        return statistics.median(samples) if samples else None

    def _oriented(self, journal_value: float, other: float) -> float:
        if self.better == "higher":
            return journal_value / other if other else float("inf")
        return other / journal_value if journal_value else float("inf")

    def ratio_value(self, other: str) -> float | None:
        j, s = self.median("journal"), self.median(other)
        if not self.ratio or j is None or s is None:
            return None
        return self._oriented(j, s)

    def ratio_range(self, other: str) -> tuple[float, float] | None:
        """Min and max of the ratio over paired repetitions (they ran back to back)."""
        js, ss = self.samples.get("journal", []), self.samples.get(other, [])
        if not self.ratio or len(js) < 2 or len(js) != len(ss):
            return None
        ratios = [self._oriented(j, s) for j, s in zip(js, ss, strict=True)]
        return min(ratios), max(ratios)

    def spread(self, side: str) -> tuple[float, float] | None:
        samples = self.samples.get(side)
        return (min(samples), max(samples)) if samples and len(samples) > 1 else None

    def as_json(self) -> dict[str, object]:
        return {
            "label": self.label,
            "unit": self.unit,
            "better": self.better,
            "note": self.note,
            "text": self.text,
            "samples": self.samples,
            "medians": {side: self.median(side) for side in self.samples},
            "ratios": {
                other: {"median": self.ratio_value(other), "range": self.ratio_range(other)}
                for other in OTHERS
                if other in self.samples and self.ratio
            },
        }


@dataclass
class Section:
    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row


def growth_row(label: str, small: Row, large: Row) -> Row:
    """How much each store's median time grew from the `small` row to the `large` one."""
    samples: dict[str, list[float]] = {}
    for side in COLUMNS:
        a, b = small.median(side), large.median(side)
        if a and b is not None:
            samples[side] = [b / a]
    return Row(label, "x", samples, ratio=False, note="1.00x = flat")


def fmt_time(seconds: float) -> str:
    for scale, unit in ((1e-6, "µs"), (1e-3, "ms"), (1.0, "s")):
        value = seconds / scale
        if value < 1000 or unit == "s":
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f} {unit}"
    raise AssertionError("unreachable")


def fmt_bytes(value: float) -> str:
    size = abs(value)
    if size < 10 * KIB:
        return f"{value:,.0f} B"
    if size < 10 * MIB:
        return f"{value / KIB:,.1f} KiB"
    if size < 10 * 1024 * MIB:
        return f"{value / MIB:,.1f} MiB"
    return f"{value / (1024 * MIB):,.2f} GiB"


def fmt_value(value: float | None, unit: Unit) -> str:
    if value is None:
        return ""
    if unit == "ops/s":
        return f"{value:,.0f}/s" if value >= 100 else f"{value:.1f}/s"
    if unit == "s":
        return fmt_time(value)
    if unit == "B":
        return fmt_bytes(value)
    return f"{value:.2f}x"


def fmt_ratio(value: float) -> str:
    if value < 0.1:
        return f"{value:.3f}x"
    return f"{value:.2f}x" if value < 100 else f"{value:,.0f}x"


def ratio_cell(row: Row, other: str) -> str:
    value = row.ratio_value(other)
    if value is None:
        return ""
    spread = row.ratio_range(other)
    text = fmt_ratio(value)
    if spread:
        text += f" {fmt_ratio(spread[0])[:-1]}-{fmt_ratio(spread[1])}"
    return text


W_LABEL, W_VALUE, W_RATIO = 54, 10, 17
LINE = W_LABEL + 4 * (W_VALUE + 1) + 3 * (W_RATIO + 1)


def header() -> str:
    values = " ".join(f"{name:>{W_VALUE}}" for name in COLUMNS)
    ratios = " ".join(f"{'vs ' + name:<{W_RATIO}}" for name in OTHERS)
    return f"{'workload':<{W_LABEL}} {values} {ratios} note"


def print_section_header(section: Section) -> None:
    print()
    print(f"── {section.title} " + "─" * max(0, LINE - len(section.title) - 4))


def format_row(row: Row) -> str:
    label = row.label if len(row.label) <= W_LABEL else row.label[: W_LABEL - 1] + "…"
    if row.text:
        return f"{label:<{W_LABEL}} {row.text}"
    values = " ".join(f"{fmt_value(row.median(side), row.unit):>{W_VALUE}}" for side in COLUMNS)
    ratios = " ".join(f"{ratio_cell(row, other):<{W_RATIO}}" for other in OTHERS)
    return f"{label:<{W_LABEL}} {values} {ratios} {row.note}".rstrip()


def print_section(section: Section) -> None:
    for row in section.rows:
        print(format_row(row))
    for note in section.notes:
        print(f"  · {note}")
    sys.stdout.flush()


def markdown_table(sections: Sequence[Section]) -> str:
    """The sections as one Markdown table (medians, each ratio with its range)."""
    lines = [
        "| workload | journal | mobius | tuned | floor | vs mobius | vs tuned | vs floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for section in sections:
        lines.append(f"| **{section.title}** | | | | | | | |")
        for row in section.rows:
            if row.text:
                lines.append(f"| {row.label} | {row.text} | | | | | | |")
                continue
            cells = [fmt_value(row.median(side), row.unit) for side in COLUMNS]
            cells += [ratio_cell(row, other) for other in OTHERS]
            label = row.label.strip() if not row.note else f"{row.label.strip()} ({row.note})"
            lines.append("| " + " | ".join([label.replace("|", "/"), *cells]) + " |")
    return "\n".join(lines)
