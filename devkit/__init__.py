"""The project's development kit: what tests and ``bench/`` use and the wheel does not ship.

The chaos runner (``devkit.chaos``) and the job function it runs (``devkit.chaos_process``),
the PNG charts of the benchmarks (``devkit.plots``), the fault-injecting HTTP proxy
(``devkit.faultproxy``), the LocalStack and standalone-cluster fixtures, and small helpers of
the tests (``devkit.spark``, ``devkit.status``, ``devkit.holders``, ``devkit.scrape``).

It imports the product; the product never imports it (a test checks both that and the wheel's
file list). The small harness a user may want too (a local Kinesis server, a ZooKeeper, a
stream) is :mod:`kinesis_spout.testing`, which ships. ``scripts/test.sh`` makes this folder
importable in its virtualenv (a ``.pth`` file naming the checkout).
"""
