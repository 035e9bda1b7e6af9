"""Query parameters of the viewer's URLs, checked: a bad one is an
`InvalidInputError` (HTTP 400) that names it, never a guess."""

from __future__ import annotations

import datetime
from typing import Any

from journal import InvalidInputError

MAX_SEQUENCE = (1 << 63) - 2
# Times a filter takes, as Unix seconds: the years 1 to 9999 that dates can name.
MIN_TIME = int(datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc).timestamp())
MAX_TIME = int(
    datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc).timestamp()
)


def _whole(text: str) -> bool:
    """ASCII digits only: `str.isdigit` also takes superscripts and fullwidth digits."""
    return text.isascii() and text.isdigit()


class Params:
    def __init__(self, query: dict[str, list[str]]):
        self.query = query

    def text(self, name: str) -> str | None:
        values = self.query.get(name)
        if not values:
            return None
        value = values[-1].strip()
        return value or None

    def seq(self, name: str) -> int | None:
        """A sequence number (a whole number, 0 or more), or None when absent."""
        text = self.text(name)
        if text is None:
            return None
        if not _whole(text) or int(text) > MAX_SEQUENCE:
            raise InvalidInputError(f"{name}={text!r} is not a sequence number")
        return int(text)

    def limit(self, default: int) -> int:
        n = self.seq("limit")
        if n == 0:
            raise InvalidInputError("limit=0: give at least 1")
        return default if n is None else n

    def flag(self, name: str) -> bool:
        return self.text(name) not in (None, "0", "false", "no")

    def types(self) -> list[str]:
        """Event types: `type` repeated, or several in one value (spaces, commas)."""
        out: list[str] = []
        for value in self.query.get("type", []):
            out += [t for t in value.replace(",", " ").split() if t not in out]
        return out

    def time(self, name: str, end_of_day: bool = False) -> int | None:
        """A time as Unix seconds: a whole number, or an ISO date or date and time (UTC
        unless it says otherwise). A bare date as an end means the end of that day.
        A time outside the years 1 to 9999 is refused: pages show times as dates."""
        text = self.text(name)
        if text is None:
            return None
        if _whole(text):
            seconds = int(text)
        else:
            try:
                at = datetime.datetime.fromisoformat(text)
            except ValueError:
                raise InvalidInputError(
                    f"{name}={text!r} is neither Unix seconds nor an ISO date (2026-01-31)"
                ) from None
            if at.tzinfo is None:
                at = at.replace(tzinfo=datetime.timezone.utc)
            seconds = int(at.timestamp())
            if end_of_day and len(text) == 10:
                seconds = min(seconds + 86_400, MAX_TIME)
        if not MIN_TIME <= seconds <= MAX_TIME:
            raise InvalidInputError(f"{name}={text!r} is outside the years 1 to 9999")
        return seconds

    def sessions(self) -> dict[str, Any]:
        """The sessions list's parameters, as `Data.sessions` takes them."""
        return {
            "limit": self.limit(50),
            "before": self.text("before"),
            "owner": self.text("owner"),
            "q": self.text("q"),
            "since": self.time("since"),
            "until": self.time("until", end_of_day=True),
        }

    def diff(self) -> tuple[str, int | None, str, int | None]:
        """(a, at_a, b, at_b): b defaults to a (two sequences of one session)."""
        a = self.text("a")
        if a is None:
            raise InvalidInputError("give a= (a session id), and b= or at_a=/at_b=")
        return a, self.seq("at_a"), self.text("b") or a, self.seq("at_b")
