"""Executor reads, the read path: the driver's planner (``planner``), the values a read
task is given and returns (``plan``), running a micro-batch's plans as one Spark job and
isolating what fails them (``jobs``), the task itself (``task``) and its bounded reads of
the shards (``shards``), the recorded ranges that make a task re-computable
(``recorded``), the DataFrame styles over what the tasks read (``frames``), records spread
past the shards (``shuffle``) and the one-record read of a poison (``alone``)."""
