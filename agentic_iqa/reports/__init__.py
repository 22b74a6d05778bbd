"""Turn what a job produced into results: metrics, reports, comparisons, figures and exports.

Everything here reads a job's per-item rows (exported rows, or a job's columns read from the
database) and needs no database or queue itself, so the CLI, the workers and offline analysis
share it (what goes into a job is :mod:`agentic_iqa.jobs`):

- :mod:`.export` writes a job's rows to CSV, JSONL or Parquet as a stream, and :mod:`.columns`
  reads them back as typed columns (:mod:`.cells` reads one cell); :mod:`.hf` writes them,
  with their traces, as a Hugging Face ``datasets`` folder;
- :mod:`.trace` assembles one item's trace (plan, distortions, tool calls, answer, replans,
  model calls, rank error) from its stored rows;
- :mod:`.metrics` computes SRCC, PLCC (raw and after a logistic fit), KRCC with bootstrap
  intervals, and MCQ accuracy;
- :mod:`.report` builds a job's report, :mod:`.report_text` and :mod:`.report_html` render it,
  with :mod:`.breakdown` (by distortion), :mod:`.own_scores` (the tools' own scores),
  :mod:`.in_sample` (images a tool was fitted on) and :mod:`.errors` (an item's error as a
  person reads it);
- :mod:`.compare` sets jobs side by side (:mod:`.pairing` matches their items and bootstraps
  the paired differences; :mod:`.compare_text` and :mod:`.compare_html` render it),
  :mod:`.sweeps` groups a sweep's jobs, :mod:`.tables` writes tables for papers,
  :mod:`.figures` draws the figures, :mod:`.figure_files` writes them (SVG, PDF, inline), and
  :mod:`.names` names their lines.
"""
