"""The reading core, in parts every reading mode shares.

* :mod:`~kinesis_spout.core.partition` — one shard's reading state: its
  tracker, its replay window and the write-ahead of its dead letters;
* :mod:`~kinesis_spout.core.committer` — checkpoint writes: when a shard's
  checkpoint may be saved, pinned starts, shard ends, fencing of a stale owner.

The pure shard registry (lineage, states) is :mod:`kinesis_spout.kinesis.shards`
and the fetcher is :mod:`kinesis_spout.kinesis.getter`;
:class:`~kinesis_spout.spout.KinesisSpout` puts them together.
"""
