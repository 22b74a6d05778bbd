"""The words around an option letter that decide whether the model chose it.

Kept apart from the reading (:mod:`agentic_iqa.options`) so that the vocabulary can grow
without touching the rule: what may touch a letter, what makes "A" the article, which words
commit to an answer, which negate or hedge one.  Every pattern is case-insensitive except the
letters themselves, which the reader inserts case-sensitively where only a capital may count.
"""

from __future__ import annotations

import re

#: What may not touch a letter standing as an option: letters and digits of a word, an
#: apostrophe ("I'd"), a hyphen ("B-level"), the slash of "N/A", a grade's sign ("A+", "C-").
LEFT = r"(?<![A-Za-z0-9À-ÖØ-öø-ÿ'’_\-])(?<![A-Za-z]/)"
RIGHT = r"(?![A-Za-z0-9À-ÖØ-öø-ÿ'’_+]|-(?!\s))"

#: Markdown and quotes that may wrap a letter.
DECORATION = r"[\s*_`\"'#>•\[\](（)）]"

#: Lower-case words that make a capital "A" the option rather than the article: "A is
#: correct", "A, because", "A or B" ("A good image" is the article).
OPTION_WORDS = re.compile(
    r"\s+(?:is|was|would|will|could|should|might|may|must|seems|appears|looks|fits|matches|"
    r"suits|describes|captures|reflects|applies|works|best|because|since|as|or|and|nor|here|"
    r"overall|it|does|has|remains|stands|gets|requires|means|corresponds|sounds|feels|then|"
    r"(?:is|was|does|would|could|can)n['’]t|cannot)\b")

#: What separates a marker ("Answer", "The answer is", "答案是") from its letter.
SEPARATOR = (r"(?:\s*(?:\*\*|__|\*|[\"'])?\s*(?:[:=：]|[-–—](?=\s)|\bis\b|\bwould\s+be\b|"
             r"\bwill\s+be\b|\bes\b|\bist\b|\best\b|\bé\b|是|为|為)\s*)*"
             r"[\s*_`\"'>\[（(]*(?:(?:option|choice|letter)\s+)?[\[（(]*")
#: The same, where at least one separator must stand ("Rating: B", "The best option is C";
#: "Option B would" names the option, it does not answer).
SEPARATOR_REQUIRED = (r"\s*(?:\*\*|__|\*|[\"'])?\s*(?:[:=：]|\bis\b|\bwould\s+be\b)"
                      + SEPARATOR)

#: Markers of a final verdict, which no other reading displaces.
FINAL = r"\bfinal\s+(?:answer|choice|verdict|rating|grade|selection|decision|assessment|pick)\b"
#: "Answer" in the languages models answer in.
ANSWER = r"(?:\b(?:answer|antwort|réponse|respuesta|resposta|risposta|ответ)\b|答案)"
#: Labels that commit only with a separator: "Rating: B", "The best option is C".
LABEL = r"\b(?:option|choice|rating|verdict|grade|selection|category|level|pick|conclusion)\b"
#: "I'd say", "I would choose", "I'll go with", "I'd rate it as".
FIRST_PERSON = (
    r"\bI(?:['’]d|['’]ll|\s+would|\s+will|\s+can|\s+must)?\s+(?:(?:definitely|probably|"
    r"therefore|thus|also|still)\s+)?(?:choose|pick|select|go\s+with|say|opt\s+for|"
    r"lean\s+(?:towards?|to)|rate\s+(?:it|this(?:\s+(?:image|photo|picture|one))?)"
    r"(?:\s+(?:as|an?))?|answer|vote\s+for|settle\s+on)\b"
    r"\s*[:\-–—]?[\s*_`\"'(\[]*(?:(?:option|choice)\s+)?[(\[]*")
#: After the letter: "A is correct", "A fits best", "C is my answer".
VERDICT_AFTER = (
    r"[)\]]?(?:\s*\([^()\n]{0,40}\))?[*_]*\s+(?:(?:is|seems|appears|would\s+be|looks)\s+"
    r"(?:the\s+|my\s+)?(?:correct|right|best|most\s+\w+|appropriate|accurate|answer|closest|"
    r"choice|pick)\b|(?:fits|matches|describes|suits|works)(?:\s+\w+)?\s+best\b|"
    r"best\s+(?:fits|describes|matches|captures|reflects)\b)")
#: A change of mind: "B. Actually, it's C", "On second thought, C" (a second committed
#: answer, so that the two disagree and the reply is asked again).
CORRECTION = (r"\b(?:actually|on\s+(?:second\s+thought|reflection)|wait|correction|"
              r"scratch\s+that|I\s+mean)\b[\s,:;!—–\-]*(?:no\b[\s,.;!—–\-]*)?(?:(?:it['’]s|"
              r"it\s+is|the\s+answer\s+is|make\s+it|I['’]d\s+say)\s+)?(?:(?:option|choice)\s+)?"
              r"[(\[*]*")
#: The reply's last sentence drawing its conclusion: "So B.", "Therefore, C."
CONCLUDING = r"\b(?:so|therefore|thus|hence|overall|in\s+short|in\s+conclusion)\s*,?\s*[(\[*_]*"

#: Where a clause ends, so a negation before it no longer reaches a letter.
BOUNDARY = re.compile(
    r"[.!?;:\n,，。；：！？|]|\s[—–-]\s|(?<!anything )\b(?:but|so|and|then|therefore|thus|"
    r"hence|because|while|whereas|although|though|sondern|aber|mais|pero)\b|但|而是", re.I)
#: A negation before a letter, at most three words before it: "Not A", "I wouldn't say D",
#: "rather than C", "not Excellent (A)", "ruling out E", "不是A".
NEGATION_BEFORE = re.compile(
    r"\b(?:not|never|no|neither|nor|without|except|excluding|unlike|than|over|versus|vs|"
    r"against|nicht|pas|não)\b|n['’]t\b|\brather\s+than\b|\binstead\s+of\b|\bother\s+than\b|"
    r"\banything\s+but\b|\bcompared\s+(?:with|to)\b|\brul(?:e|es|ed|ing)\s+out\b|\beliminat\w*|\bexclud\w*|\breject\w*|"
    r"\bno\s+es\b|不是|不选|而非", re.I)
NEGATION_REACH = 3
#: A negation after a letter (and its option text): "A is incorrect", "Option B (Slight)
#: would understate", "D (Poor) would be generous", "A (Excellent): no".
NEGATION_AFTER = re.compile(
    r"\s*(?:(?:is|are|was|would\s+be|seems|appears|['’]s)\s+(?:not\b|incorrect|wrong|unlikely|"
    r"ruled\s+out|out\b|excluded|too\b|overly|an?\s+(?:over|under)|generous|harsh|"
    r"inaccurate|off\b)|(?:is|was|does|would|wo|ca)n['’]t\b|does\s+not\b|would\s+not\b|"
    r"cannot\b|(?:can|could)\s+be\s+ruled\b|is\s+ruled\b|would\s+(?:understate|overstate|"
    r"overestimate|underestimate|exaggerate|be\s+(?:too|wrong|incorrect|generous|harsh|"
    r"an?\s+(?:over|under))\b)|(?:understates|overstates|overestimates|underestimates)\b|"
    r"(?:both\s+|all\s+)?(?:look|looks|seem|seems|sound|sounds)\s+(?:wrong|incorrect|off|"
    r"unlikely)\b|:\s*(?:no|not|wrong|incorrect|too)\b|\?\s*(?:no|nope)\b|"
    r"[-–—]\s*(?:no|wrong|incorrect)\b(?=\s*(?:[.,;!\n]|$)))", re.I)
#: Between the two letters of a hedge: "A or B", "B/C", "A vs B", "B 或 C".
HEDGE_OR = (r"\s*,?\s*(?:or|/|oder|ou|o|或者?|vs\.?|versus)\s*"
            r"(?:(?:maybe|perhaps|possibly|probably|even|also)\s+)?")
#: Before a hedge whose letters are joined by "and": "between A and B", "both B and C".
HEDGE_BETWEEN = r"\b(?:either|between|both)\s+"
HEDGE_AND = r"\s*,?\s*(?:or|and|&)\s*"
#: What may follow a committed letter in a reply cut at the cap for the letter to be written
#: ("C, because", "D. The", "A is correct"): not "or" ("an", "no"), which may go on "or C".
SETTLED = re.compile(
    r"[)\]）*_`\"']*(?:\s*(?:[.,;:!?\n—–(（]|-\s)|"
    r"\s+(?!(?:or|an|and|no|nor|vs|versus|oder|ou)\b)[^\W\d_]{2,})", re.I)
#: What may follow a lower-case letter for it to be an option ("answer: c", "(b)."), never a
#: word ("Answer: a good image").
CLOSED = re.compile(r"[)\]）]?[*_`\"']*\s*(?:$|[.,;:!?)\]）\n]|\s[-–—(（])")
