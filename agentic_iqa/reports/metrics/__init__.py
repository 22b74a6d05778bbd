"""Measure how well predicted scores agree with human opinion (MOS), and how often MCQ answers
are right.

The IQA literature reports SRCC (monotonic agreement), PLCC (linear agreement, usually after a
logistic fit) and KRCC; point estimates on a few hundred images are noisy, so each comes with a
bootstrap confidence interval.  The correlations themselves are scipy's; these modules add the
fit, the resampling and the bookkeeping for inputs too small or too flat to correlate:

- :mod:`.correlations`: SRCC, PLCC and KRCC, with lean forms for a million pairs;
- :mod:`.logistic`: PLCC after a monotone logistic fit;
- :mod:`.bootstrap`: intervals of correlations and of shares (accuracy);
- :mod:`.summary`: :func:`correlation_report`, all of them as JSON-able data;
- :mod:`.accuracy`: MCQ answers read as letters, and their tally.
"""

from __future__ import annotations

from .accuracy import McqTally, answer_letter
from .bootstrap import BOOTSTRAP_PAIRS, bootstrap_ci, draw_resamples, proportion_ci, resampler
from .correlations import LARGE, average_ranks, inversions, krcc, plcc, srcc
from .logistic import FIT_FORMS, FIT_SAMPLE, LogisticFit, fit_label, plcc_after_logistic
from .summary import correlation_report

__all__ = [
    "BOOTSTRAP_PAIRS",
    "FIT_FORMS",
    "FIT_SAMPLE",
    "LARGE",
    "LogisticFit",
    "McqTally",
    "answer_letter",
    "average_ranks",
    "bootstrap_ci",
    "correlation_report",
    "draw_resamples",
    "fit_label",
    "inversions",
    "krcc",
    "plcc",
    "plcc_after_logistic",
    "proportion_ci",
    "resampler",
    "srcc",
]
