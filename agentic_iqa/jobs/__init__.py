"""Say what goes into a dataset evaluation job: its spec, its items and the rules it runs by.

A job points the agent at thousands of images listed in a manifest or a registered dataset and
compares what it says with human opinion when that is known.  This package holds the pure parts
of a job's input, with no database or queue, so that the CLI, the workers and offline analysis
share them (a job's life, stored, is :mod:`agentic_iqa.runtime.lifecycle`; what comes out of it
is :mod:`agentic_iqa.reports`):

- :mod:`.spec` is the job's validated specification;
- :mod:`.manifest` streams a CSV / JSONL / Parquet / image-folder manifest as checked items and
  bad rows, and :mod:`.sources` reads a registered dataset the same way;
- :mod:`.subset` chooses which rows run, :mod:`.paths` keeps image paths inside their root;
- :mod:`.tools` resolves a metric job's tools, :mod:`.estimate` prices a job before it runs;
- :mod:`.policy` says when a job stops early.
"""
