"""Scraping a ``/metrics`` endpoint in tests: :func:`scrape` and :func:`wait_for_scrape`.

Parses the text format with prometheus_client's own parser, as a Prometheus
server would read it.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kinesis_spout.errors import KinesisSpoutError


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of a scrape."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Scrape:
    """Every sample of one scrape."""

    samples: tuple[Sample, ...]
    text: str

    def select(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def sum(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` with these labels (0 if none)."""
        return sum(s.value for s in self.select(name, **labels))

    def by(self, label: str, name: str, **labels: str) -> dict[str, float]:
        """The samples of ``name`` with these labels, by the value of ``label``."""
        out: dict[str, float] = {}
        for s in self.select(name, **labels):
            key = s.labels.get(label, "")
            out[key] = out.get(key, 0.0) + s.value
        return out


class ScrapeTimeout(KinesisSpoutError):
    """The endpoint never showed what was waited for."""


def scrape(url: str, timeout: float = 5.0) -> Scrape:
    """GET ``url`` (a ``/metrics`` endpoint) and parse it."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode("utf-8")
    samples = tuple(
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    )
    return Scrape(samples, text)


def wait_for_scrape(
    url: str, until: Callable[[Scrape], bool], *, timeout: float, what: str, poll: float = 0.2
) -> Scrape:
    """Scrape until ``until`` holds; :class:`ScrapeTimeout` naming ``what`` (and the
    last scrape's kinesis_spout lines) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Scrape | None = None
    error: Exception | None = None
    while True:
        try:
            last = scrape(url)
            if until(last):
                return last
        except OSError as exc:  # not listening yet
            error = exc
        if time.monotonic() >= deadline:
            shown = (
                ""
                if last is None
                else "\n".join(
                    line for line in last.text.splitlines() if line.startswith("kinesis_spout_")
                )
            )
            raise ScrapeTimeout(f"{url} never showed {what} in {timeout:g}s ({error}):\n{shown}")
        time.sleep(poll)
