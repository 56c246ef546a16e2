"""Processing a micro-batch: the user's three styles and what runs them (``styles``),
records to Arrow and statuses back (``arrow``), the status columns a transform or a sink
returns (``contract``), column expressions made once (``exprs``), the DataFrame styles on
Spark (``runner``), a per-record function's fast retries (``fastretry``), fan-out with
Storm's acker (``fanout``, its sinks ``fanout_sinks``, ``settle`` on the executors) and
the sinks (``sinks``)."""
