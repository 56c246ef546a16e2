"""``kinesis-spout status``: how far behind each shard is, who owns it, what was
dead-lettered, whether the job runs.

* :mod:`.model`: the value objects of a report;
* :mod:`.collect`: pure assembly of a report from what the sources read;
* :mod:`.sources_store`, :mod:`.sources_leases`, :mod:`.sources_kinesis`,
  :mod:`.sources_deadletters`: read-only access to the checkpoint store, the
  leases, Kinesis and the dead-letter target;
* :mod:`.render` (JSON) and :mod:`.table` (people);
* :mod:`.command`: the command line.
"""

from __future__ import annotations

from kinesis_spout.status.collect import StatusInputs, collect
from kinesis_spout.status.model import ShardPhase, StatusError, StatusReport

__all__ = ["ShardPhase", "StatusError", "StatusInputs", "StatusReport", "collect"]
