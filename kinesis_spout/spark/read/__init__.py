"""The read path on Spark: a micro-batch's plans as one Spark job, and cutting down a job
that fails (``jobs``), when a running job's deadline counts from (``deadlines``), the
DataFrame styles over what the read tasks read (``frames``; its read stage ``stage``, the
rows' numbering ``rows``, the jobs' keys ``keys``, a fan-out's emit reports
``emit_reports``), the recorded ranges that make a task re-computable (``recorded``), a
transform's fast retries (``followup``) and records spread past the shards (``shuffle``).
The plans are :mod:`kinesis_spout.spark.plan`, the task :mod:`kinesis_spout.spark.task`."""
