"""The Kinesis side: the boto3 adapter, shard getters and shard lineage.

Only this package touches boto3 and botocore; everything it returns is a
value object from :mod:`kinesis_spout.records` and every error it raises is a
:class:`~kinesis_spout.errors.KinesisSpoutError`.
"""
