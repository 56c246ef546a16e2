"""Processing a micro-batch: records to Arrow and statuses back (``arrow``), one
micro-batch on Spark (``runner``), fast retries (``fastretry``, ``followup``), fan-out
with Storm's acker (``fanout``, ``ledger`` on the driver, ``settle`` on the executors)
and the sinks (``sinks``). The user's processing styles are
:mod:`kinesis_spout.spark.processing`."""
