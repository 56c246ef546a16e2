"""Example jobs: :mod:`~kinesis_spout.examples.wordcount` (Storm's word count)
and the demo that runs it (:mod:`~kinesis_spout.examples.demo`)."""
