"""Storm's classic word count, on Kinesis and Spark, with Storm's guarantee.

Each record is a JSON sentence; :func:`split_sentence` emits its words anchored to it
(fan-out) and :class:`WordCountSink` writes each micro-batch's counts to Parquet, so a
sentence is acked only once every one of its word counts is written. What it does with
poison and replays: docs/spark-job.md ("The word-count example"). Run it::

    kinesis-spout run --config kinesis_spout/examples/wordcount.toml \\
        --process kinesis_spout.examples.wordcount:job --endpoint-url http://...

The counts go to ``$WORDCOUNT_OUTPUT`` (default ``./wordcount-output``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.spark import (
    FanOutProcessor,
    InputRecord,
    fan_out,
    processor_factory,
)

OUTPUT_ENV = "WORDCOUNT_OUTPUT"
DEFAULT_OUTPUT = "./wordcount-output"
CONFIG_FILE = Path(__file__).with_name("wordcount.toml")

SENTENCES = (
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
)
"""The sentences of Storm's ``RandomSentenceSpout``."""


def split_sentence(record: InputRecord) -> list[str]:
    """The words of a sentence record (lower case). Raises on poison records."""
    doc = json.loads(record.data)  # not JSON: JSONDecodeError, the record fails
    sentence = doc.get("sentence") if isinstance(doc, dict) else None
    if not isinstance(sentence, str):
        raise ValueError(f"record {doc!r} has no sentence string")
    return sentence.lower().split()


class WordCountSink:
    """Counts the words of each micro-batch and appends them to Parquet files.

    Returns ``None``: when it returns, every word it was given is written
    (an exception fails the batch instead).
    """

    name = "word-count"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def __call__(self, words: Any) -> None:
        from kinesis_spout.spark.arrowframes import to_arrow
        from kinesis_spout.spark.process.sinks import write_parquet_file

        counts = to_arrow(words.groupBy("word").count())
        if counts.num_rows:
            write_parquet_file(counts, self.directory, "counts")


@processor_factory
def job(config: SpoutConfig) -> FanOutProcessor:
    """The word-count processor; counts go to ``$WORDCOUNT_OUTPUT``."""
    out = os.environ.get(OUTPUT_ENV) or DEFAULT_OUTPUT
    return fan_out(split_sentence, "word string", [WordCountSink(out)], name="wordcount")


def read_counts(directory: str | Path) -> Counter[str]:
    """The total count of each word over every file :class:`WordCountSink` wrote."""
    import pyarrow.parquet as pq

    total: Counter[str] = Counter()
    for path in sorted(Path(directory).glob("counts-*.parquet")):
        table = pq.read_table(path)
        for word, n in zip(
            table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True
        ):
            total[word] += n
    return total


# --- sample data (the demo and the tests) -----------------------------------------

POISON_EVERY = 50
"""One record in this many is poison."""


def sample_records(
    chunk: int, size: int, *, poison_every: int = POISON_EVERY
) -> list[tuple[str, bytes]]:
    """``(partition key, data)`` of chunk ``chunk``: ``size`` records, the same
    bytes every time for the same arguments. Records ``i`` with
    ``i % poison_every == poison_every - 1`` are poison (alternately not JSON,
    and JSON without a sentence string)."""
    out: list[tuple[str, bytes]] = []
    for i in range(size):
        n = chunk * size + i
        if poison_every and i % poison_every == poison_every - 1:
            if (n // poison_every) % 2:
                data = f'{{"id": {n}, "sentence": "cut off in the mid'.encode()
            else:
                data = json.dumps({"id": n, "sentence": n}).encode()
        else:
            data = json.dumps({"id": n, "sentence": SENTENCES[n % len(SENTENCES)]}).encode()
        out.append((f"sentence-{n}", data))
    return out


def expected_counts(items: Iterable[tuple[str, bytes]]) -> Counter[str]:
    """The word counts a correct run produces from ``items`` (poison skipped)."""
    total: Counter[str] = Counter()
    for _, data in items:
        try:
            doc = json.loads(data)
        except ValueError:
            continue
        sentence = doc.get("sentence") if isinstance(doc, dict) else None
        if isinstance(sentence, str):
            total.update(sentence.lower().split())
    return total


def is_poison(data: bytes) -> bool:
    try:
        doc = json.loads(data)
    except ValueError:
        return True
    return not (isinstance(doc, dict) and isinstance(doc.get("sentence"), str))
