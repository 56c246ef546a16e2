"""A small harness for testing code that uses kinesis-spout, as ``kazoo.testing`` is for kazoo.

Real servers started as child processes on loopback and free ports, and stopped by their
context managers: moto's Kinesis server and kinesis-mock (``servers``), ZooKeeper from
PySpark's jars (``zookeeper``), and streams created and filled on them (``streams``). Nothing
here is mocked. ``kinesis-spout demo`` uses it to start its emulator.

The project's own test kit (chaos runner, charts, fault proxy, cluster and LocalStack
fixtures) is the top-level ``devkit/`` folder of the repository, not shipped in the wheel.
"""
