"""How the command line says things: counts with their noun (``1 dead letter``,
``2 dead letters``) and an error as one line."""

from __future__ import annotations


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 shard``, ``0 shards``; ``nouns`` when the plural is not ``noun + "s"``."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


def one_line(text: str, limit: int = 1000) -> str:
    """A message as one line: its first non-blank line (the rest of an HTML error page,
    a traceback, a server's body cut off), at most ``limit`` characters (long enough for
    an error of ours naming a path and what to do, which comes last)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else text.strip()
    return first if len(first) <= limit else first[: limit - 1] + "…"


def quoted(names: list[str] | tuple[str, ...]) -> str:
    """``'orders'`` or ``'orders', 'payments'``."""
    return ", ".join(repr(n) for n in names)
