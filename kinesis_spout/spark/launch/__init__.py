"""How the job starts: building its micro-batch loop from the config (``build``), the
virtualenv ``kinesis-spout run --ship-env`` ships to the executors (``shipenv``), the tie
to its launcher (``launcher``), where the driver may run (``deploy``), the worker daemon
(``worker_daemon``) and the pyspark it imports (``sparkpath``)."""
