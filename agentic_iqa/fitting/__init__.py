"""Fit the builtin agent's models offline: only fitting and the benchmarks use this package.

A running agent never imports it.

- :mod:`.degradations`: the calibration generator (graded degradations of a photo, two or three
  realistic processes per kind) and the pixel helpers it shares;
- :mod:`.evaluation_degradations`: the test generator, other processes kept apart from the
  calibration ones, for held-out figures;
- :mod:`.severity`: fitting the builtin's severity indicators, detectors and dominance model;
- :mod:`.opinion`: fitting the builtin's opinion of overall quality.

The run-time halves (thresholds and models read from JSON) are in :mod:`agentic_iqa.vlm.builtin`.
"""
