"""Child process of the hard-kill test: runs a kinesis query in its own JVM
and hangs inside batch ``--hang-in`` (after a torn write to the sink) until
the test SIGKILLs its whole process group.

Usage: python kill_child.py ENDPOINT STREAM CHECKPOINT SINK_DIR HANG_IN OPTIONS_JSON
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from streaming_helpers import BatchSink, start_query  # noqa: E402

from devkit.spark import local_spark_session  # noqa: E402
from kinesis_spout.streaming import register  # noqa: E402


class HangingSink(BatchSink):
    def __init__(self, directory: Path, hang_in: int) -> None:
        super().__init__(directory)
        self.hang_in = hang_in

    def __call__(self, df: Any, batch_id: int) -> None:
        if batch_id == self.hang_in:
            rows = df.count()
            (self.directory / f"batch-{batch_id:06d}.json").write_text("[[")  # torn
            (self.directory / f"inside-{batch_id}").write_text(str(rows))
            time.sleep(600)
        super().__call__(df, batch_id)


def main() -> None:
    endpoint, stream, checkpoint, sink_dir, hang_in, options = sys.argv[1:7]
    spark = local_spark_session("kill-child")
    register(spark)
    sink = HangingSink(Path(sink_dir), int(hang_in))
    q = start_query(spark, stream, endpoint, sink, Path(checkpoint), **json.loads(options))
    q.awaitTermination()


if __name__ == "__main__":
    main()
