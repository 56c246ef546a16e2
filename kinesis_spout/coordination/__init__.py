"""Several workers on one stream: shard ownership through ZooKeeper.

* :mod:`~kinesis_spout.coordination.assignment` — the pure assignment function;
* :mod:`~kinesis_spout.coordination.leases` — ephemeral lease nodes with epochs;
* :mod:`~kinesis_spout.coordination.coordinator` — drives a spout from them;
* :mod:`~kinesis_spout.coordination.worker` — ``python -m`` entry point.
"""

from __future__ import annotations

from kinesis_spout.coordination.assignment import assign_shards

__all__ = ["assign_shards"]
