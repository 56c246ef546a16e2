"""The job's launch: ``kinesis-spout run`` (``submit``), the launcher tie (``launcher``),
where the driver may run (``deploy``), the worker daemon (``worker_daemon``), where
start-up time goes (``startup``) and building the driver from the config (``build``)."""
