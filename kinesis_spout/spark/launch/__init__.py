"""The job's launch: ``kinesis-spout run`` (``submit``), the virtualenv it ships to the
executors (``shipenv``), the launcher tie (``launcher``), where the driver may run
(``deploy``), the worker daemon (``worker_daemon``) and the pyspark it imports
(``sparkpath``), where start-up time goes (``startup``) and building the driver from the
config (``build``)."""
