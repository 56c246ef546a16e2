"""Local backends for tests, benchmarks and the demo.

Real servers started as child processes on loopback and free ports: moto's
Kinesis server, kinesis-mock (LocalStack's Kinesis engine), ZooKeeper from
PySpark's jars, and a fault-injecting HTTP proxy. Nothing here is mocked.
"""
