"""Read MCQ answers as option letters and tally them: right, wrong, unanswered, failed."""

from __future__ import annotations

from dataclasses import dataclass

#: The letters a manifest's ``answer`` may hold, without option texts.
_ANY_LETTER = {letter: "" for letter in "ABCDEFGH"}


def answer_letter(text: str | None) -> str | None:
    """The option letter an answer gives ("B", "b", "(B)", "B. Blurry", "Answer: B"), else None.

    The agent's own parser decides (:func:`agentic_iqa.options.parse_option`), so the
    report reads answers exactly as the summarizer does: "A blurry photo" is not a letter.
    """
    from ...options import parse_option

    return parse_option(text, _ANY_LETTER)


@dataclass(frozen=True)
class McqTally:
    """MCQ outcomes over every question that was run, as lm-evaluation-harness and VLMEvalKit
    count them: an item that failed, or finished without a letter ("Unable to determine", an
    unparseable reply), is a wrong answer, not one left out; otherwise a job where half the
    items fail could report 100 %.  Answered-only accuracy is kept beside it."""

    correct: int = 0
    #: Questions answered with a letter (right or wrong).
    answered: int = 0
    #: Items that finished without a letter.
    no_answer: int = 0
    #: Items that failed: no answer at all.
    failed: int = 0

    @property
    def questions(self) -> int:
        """Every question counted: answered, without an answer, failed."""
        return self.answered + self.no_answer + self.failed

    @property
    def accuracy(self) -> float | None:
        """Right answers over every question counted (the headline)."""
        return self.correct / self.questions if self.questions else None

    @property
    def answered_accuracy(self) -> float | None:
        """Right answers over the questions answered with a letter."""
        return self.correct / self.answered if self.answered else None
