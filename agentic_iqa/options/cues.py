"""The words around an option letter that decide whether the model chose it.

Kept apart from the reading (:mod:`agentic_iqa.options`) so that the vocabulary can grow
without touching the rule: what may touch a letter, what makes "A" the article, which words
commit to an answer, which negate or hedge one, which concede or set one aside.  Every pattern
is case-insensitive except the letters themselves, which the reader inserts case-sensitively
where only a capital may count.
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
    r"(?:is|was|does|would|could|can)n['’]t|cannot)\b"
)

#: What separates a marker ("Answer", "The answer is", "答案是") from its letter.
SEPARATOR = (
    r"(?:\s*(?:\*\*|__|\*|[\"'])?\s*(?:[:=：]|[-–—](?=\s)|\bis\b|\bwould\s+be\b|"
    r"\bwill\s+be\b|\bes\b|\bist\b|\best\b|\bé\b|是|为|為)\s*)*"
    r"[\s*_`\"'>\[（(]*(?:(?:option|choice|letter)\s+)?[\[（(]*"
)
#: The same, where at least one separator must stand ("Rating: B", "The best option is C";
#: "Option B would" names the option, it does not answer).
SEPARATOR_REQUIRED = r"\s*(?:\*\*|__|\*|[\"'])?\s*(?:[:=：]|\bis\b|\bwould\s+be\b)" + SEPARATOR

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
    r"\s*[:\-–—]?[\s*_`\"'(\[]*(?:(?:option|choice)\s+)?[(\[]*"
)
#: After the letter: "A is correct", "A fits best", "C is my answer".
VERDICT_AFTER = (
    r"[)\]]?(?:\s*\([^()\n]{0,40}\))?[*_]*\s+(?:(?:is|seems|appears|would\s+be|looks)\s+"
    r"(?:the\s+|my\s+)?(?:correct|right|best|most\s+\w+|appropriate|accurate|answer|closest|"
    r"choice|pick)\b|(?:fits|matches|describes|suits|works)(?:\s+\w+)?\s+best\b|"
    r"best\s+(?:fits|describes|matches|captures|reflects)\b)"
)
#: A change of mind: "B. Actually, it's C", "On second thought, C" (a second committed
#: answer, so that the two disagree and the reply is asked again).
CORRECTION = (
    r"\b(?:actually|on\s+(?:second\s+thought|reflection)|wait|correction|"
    r"scratch\s+that|I\s+mean)\b[\s,:;!—–\-]*(?:no\b[\s,.;!—–\-]*)?(?:(?:it['’]s|"
    r"it\s+is|the\s+answer\s+is|make\s+it|I['’]d\s+say)\s+)?(?:(?:option|choice)\s+)?"
    r"[(\[*]*"
)
#: The reply's last sentence drawing its conclusion: "So B.", "Therefore, C."
CONCLUDING = r"\b(?:so|therefore|thus|hence|overall|in\s+short|in\s+conclusion)\s*,?\s*[(\[*_]*"

#: Where a clause ends, so a negation before it no longer reaches a letter.
BOUNDARY = re.compile(
    r"[.!?;:\n,，。；：！？|]|\s[—–-]\s|(?<!anything )\b(?:but|so|and|then|therefore|thus|"
    r"hence|because|while|whereas|although|though|sondern|aber|mais|pero)\b|但|而是",
    re.I,
)
#: A negation before a letter, at most three words before it: "Not A", "I wouldn't say D",
#: "rather than C", "not Excellent (A)", "ruling out E", "不是A".
NEGATION_BEFORE = re.compile(
    r"\b(?:not|never|no|neither|nor|without|except|excluding|unlike|than|over|versus|vs|"
    r"against|nicht|pas|não)\b|n['’]t\b|\brather\s+than\b|\binstead\s+of\b|\bother\s+than\b|"
    r"\banything\s+but\b|\bcompared\s+(?:with|to)\b|\brul(?:e|es|ed|ing)\s+out\b|\beliminat\w*|\bexclud\w*|\breject\w*|"
    r"\bno\s+es\b|不是|不选|而非",
    re.I,
)
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
    r"[-–—]\s*(?:no|wrong|incorrect)\b(?=\s*(?:[.,;!\n]|$)))",
    re.I,
)
#: What ends a sentence, for the rules that weigh a letter by the sentence it stands in.
SENTENCE_END = re.compile(r"[.!?;](?=\s|$)|\n|[。！？；]")
#: Words that open a clause the sentence concedes: "Although B fits the grain, ...", "While
#: option C crossed my mind, ...".  A letter in such a clause is no answer on any tier.
CONCESSIVE = re.compile(
    r"\b(?:although|though|while|whilst|whereas|despite|albeit|granted|"
    r"even\s+if)\b",
    re.I,
)
#: Words that weigh one side of a sentence against the other ("The noise (B) is visible but the
#: blur dominates", "There is a little blur (B), though the blocking is far more visible").
#: Which side is the point depends on the words, so a letter mentioned on either side of one
#: is not read as an answer unless the reply commits to it.
CONTRAST = re.compile(
    r"\b(?:but|yet|however|though|although|while|whilst|whereas|"
    r"nevertheless|nonetheless|even\s+so|that\s+said|then\s+again|"
    r"on\s+the\s+other\s+hand|aber|mais|pero)\b|但|然而",
    re.I,
)
#: A contrast that corrects a negation rather than weighing two sides: "It is not A, but B".
CORRECTIVE = re.compile(r"but|aber|mais|pero", re.I)
NOT = re.compile(r"\b(?:not|no|never|neither|nor|nothing|nicht|pas)\b|n['’]t\b", re.I)
#: A sentence that opens by setting the one before it aside: "Option B is plausible; however,
#: the blur is heavier".
SETS_PREVIOUS_ASIDE = re.compile(
    r"[\s*_`\"'#>•\-]*(?:but|yet|however|still|nevertheless|"
    r"nonetheless|even\s+so|that\s+said|then\s+again|"
    r"on\s+the\s+other\s+hand|mais|aber|pero)\b",
    re.I,
)
#: After a letter (and its option text): the model considered it and moved on: "B is
#: tempting", "Slight (B) was my first thought", "(C) crossed my mind", "A (Noise): present,
#: but minor", "compression (C) is barely noticeable", "the noise (A) is a minor point".
SET_ASIDE_AFTER = re.compile(
    r"[)\]）*_`\"']*\s*[:\-–—]?\s*(?:(?:(?:is|was|seems|looks|sounds|feels|would\s+be|are|"
    r"were)\s+)?(?:(?:very|quite|rather|somewhat|initially|also|a\s+bit)\s+)?tempting\b|"
    r"(?:is|was)\s+(?:my\s+)?(?:first|initial)\s+(?:thought|instinct|impression|guess|"
    r"reaction|pick)\b|crossed\s+my\s+mind\b|comes?\s+to\s+mind\b|came\s+to\s+mind\b|"
    r"(?:(?:is|are|was|were)\s+)?(?:present|visible|noticeable|detectable|there)\s*,?\s+"
    r"but\b|(?:is|are)\s+(?:only\s+)?(?:a\s+)?(?:minor|secondary|side)\s+(?:point|issue|"
    r"factor|concern|detail|effect)\b|(?:is|are)\s+(?:barely|hardly|only\s+slightly)\s+"
    r"(?:noticeable|visible|present|perceptible)\b|(?:is|are)\s+(?:minimal|negligible)\b|"
    r"(?:is|was)\s+a\s+close\s+second\b|looked\s+(?:right|correct|good)\s+at\s+first\b)",
    re.I,
)
#: Before a letter, in its clause: "It's tempting to say D", "At first glance B", "My first
#: thought was C".
SET_ASIDE_BEFORE = re.compile(
    r"\btempting\s+to\s+(?:say|pick|choose|go\s+with|call\s+it|give\s+it)\b|"
    r"\bat\s+first\s+(?:glance|sight)\b|\binitially\b|\bmy\s+(?:first|initial)\s+"
    r"(?:thought|instinct|impression|guess|reaction)\s+(?:was|is)\b",
    re.I,
)
#: Before a letter, within ``MINOR_REACH`` words in its clause: a side point ("with some (C)
#: blocking", "plus some noise (A)", "there is also slight grain (A)", "a few noisy pixels
#: (A)"), unless the word is the option's own text (severity's "Slight (B)").
MINOR_BEFORE = re.compile(
    r"\b(?:some|a\s+little|a\s+bit\s+of|a\s+touch\s+of|a\s+hint\s+of|hints?\s+of|"
    r"traces?\s+of|a\s+few|slight|slightly|minor|mild|mildly|faint|faintly|also|plus|"
    r"as\s+well\s+as|along\s+with|in\s+addition\s+to|besides|apart\s+from|aside\s+from)\b",
    re.I,
)
MINOR_REACH = 4
#: After a letter, in its clause: "noise (A) is also visible", "noise (A) in places too".
MINOR_AFTER = re.compile(
    r"[)\]）*_`\"']*(?:\s+\S+){0,6}?\s+(?:also\b|too\s*(?=[.,;!?]|$)|"
    r"as\s+well\s*(?=[.,;!?]|$))",
    re.I,
)
#: Words that put a sentence's weight on one clause: "Mostly blur, with some (C) blocking".
#: A letter in another clause of the same sentence is a side point.
DOMINANT = re.compile(
    r"\b(?:mostly|mainly|chiefly|primarily|predominantly|largely|(?:pre)?domina\w*|main|"
    r"principal|primary|biggest|major|strongest|worst|stands?\s+out)\b",
    re.I,
)

#: Between the two letters of a hedge: "A or B", "B/C", "A vs B", "B 或 C".
HEDGE_OR = (
    r"\s*,?\s*(?:or|/|oder|ou|o|或者?|vs\.?|versus)\s*"
    r"(?:(?:maybe|perhaps|possibly|probably|even|also)\s+)?"
)
#: Before a hedge whose letters are joined by "and": "between A and B", "both B and C".
HEDGE_BETWEEN = r"\b(?:either|between|both)\s+"
HEDGE_AND = r"\s*,?\s*(?:or|and|&)\s*"
#: What may follow a committed letter in a reply cut at the cap for the letter to be written
#: ("C, because", "D. The", "A is correct"): not "or" ("an", "no"), which may go on "or C".
SETTLED = re.compile(
    r"[)\]）*_`\"']*(?:\s*(?:[.,;:!?\n—–(（]|-\s)|"
    r"\s+(?!(?:or|an|and|no|nor|vs|versus|oder|ou)\b)[^\W\d_]{2,})",
    re.I,
)
#: What may follow a lower-case letter for it to be an option ("answer: c", "(b)."), never a
#: word ("Answer: a good image").
CLOSED = re.compile(r"[)\]）]?[*_`\"']*\s*(?:$|[.,;:!?)\]）\n]|\s[-–—(（])")
