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
#: apostrophe inside a word ("I'd", "B's"; a quote around the letter may: "'B'"), a hyphen
#: ("B-level"), the slash of "N/A", a grade's sign ("A+", "C-").
LEFT = r"(?<![A-Za-z0-9À-ÖØ-öø-ÿ_\-])(?<![A-Za-z0-9À-ÖØ-öø-ÿ]['’])(?<![A-Za-z]/)"
RIGHT = r"(?![A-Za-z0-9À-ÖØ-öø-ÿ_+]|['’][A-Za-z]|-(?!\s))"

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
    r"\bwill\s+be\b|\bes\b|\bist\b|\best\b|\bé\b|(?:应该|應該|应当|應當)?(?:是|为|為)|は)\s*)*"
    r"[\s*_`\"'>\[（(]*(?:(?:option|choice|letter)\s+)?[\[（(]*"
)
#: The same, where at least one separator must stand ("Rating: B", "The best option is C";
#: "Option B would" names the option, it does not answer).
SEPARATOR_REQUIRED = r"\s*(?:\*\*|__|\*|[\"'])?\s*(?:[:=：]|\bis\b|\bwould\s+be\b)" + SEPARATOR

#: Markers of a final verdict, which no other reading displaces.
FINAL = r"\bfinal[\s_]+(?:answer|choice|verdict|rating|grade|selection|decision|assessment|pick)\b"
#: "Answer" in the languages models answer in.
ANSWER = r"(?:\b(?:answer|antwort|réponse|respuesta|resposta|risposta|ответ)\b|答案|答え|正解|解答)"
#: Labels that commit only with a separator: "Rating: B", "The best option is C".
LABEL = r"\b(?:option|choice|rating|verdict|grade|selection|category|level|pick|conclusion)\b"
#: "I'd say", "I would choose", "I'll go with", "I'd rate it as".
FIRST_PERSON = (
    r"\bI(?:['’]d|['’]ll|\s+would|\s+will|\s+can|\s+must)?\s+(?:(?:definitely|probably|"
    r"therefore|thus|also|still)\s+)?(?:choose|pick|select|go\s+with|say|opt\s+for|"
    r"lean\s+(?:towards?|to)|rate\s+(?:it|this(?:\s+(?:image|photo|picture|one))?)"
    r"(?:\s+(?:as|an?))?|answer|vote\s+for|settle\s+on)\b"
    r"\s*[:\-–—]?[\s*_`\"'(\[]*(?:(?:option|choice)\s+)?[(\[]*"
    r"|\bI(?:['’]m|\s+am)\s+(?:(?:definitely|probably|still|also)\s+)?(?:choosing|picking|"
    r"selecting|going\s+(?:with|for)|opting\s+for|voting\s+for|settling\s+on|leaning\s+"
    r"(?:towards?|to))\b\s*[:\-–—]?[\s*_`\"'(\[]*(?:(?:option|choice)\s+)?[(\[*_`\"']*"
)
#: Choosing in Chinese: "我选择B", "选C", "我会选 D", "我认为是C" ("选项" is "option", no verb).
CHOOSE_CJK = (
    r"(?:我(?:会|會|最终|最終|还是|還是)?)?(?:选择|選擇|选|選)(?![项項])\s*[:：]?\s*"
    r"(?:(?:选项|選項)\s*)?[(（\[*_`\"'“‘「]*"
    r"|(?:我)?(?:认为|認為|觉得|覺得)(?:应该|應該)?(?:是|选|選)\s*[(（\[*_`\"'“‘「]*"
)
#: "It's C", "i think it's c", "That is B" (a lower-case letter too, where it closes); not
#: the hypothetical "it would be B".
COPULA = (
    r"\b(?:it|that|this)(?:['’]s|\s+is|\s+must\s+be|\s+has\s+to\s+be)\s+"
    r"(?:(?:clearly|definitely|certainly|obviously|surely)\s+)?(?:an?\s+)?"
    r"(?:(?:option|choice)\s+)?[(\[*_`\"']*"
)
#: After the letter: "A is correct", "A fits best", "C is my answer".
VERDICT_AFTER = (
    r"(?:[)\]]?(?:\s*\([^()\n]{0,40}\))?[*_]*\s+(?:(?:is|seems|appears|would\s+be|looks)\s+"
    r"(?:the\s+|my\s+)?(?:correct|right|best|most\s+\w+|appropriate|accurate|answer|closest|"
    r"choice|pick)\b|(?:fits|matches|describes|suits|works)(?:\s+\w+)?\s+best\b|"
    r"best\s+(?:fits|describes|matches|captures|reflects)\b)"
    r"|[)\]）]?[*_`\"'”’」]*\s*(?:を選(?:び|択|ぶ|ん)|が(?:正解|正しい|最適)|是正确|是正確|是对|是對|"
    r"最合适|最合適|最符合))"
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
    r"hence|because|while|whereas|although|though|sondern|aber|mais|pero)\b|但|而是|所以|因此|因为|因為",
    re.I,
)
#: A negation before a letter, at most three words before it: "Not A", "I wouldn't say D",
#: "rather than C", "not Excellent (A)", "ruling out E", "不是A".
NEGATION_BEFORE = re.compile(
    r"\b(?:not|never|no|neither|nor|without|except|excluding|unlike|than|over|versus|vs|"
    r"against|nicht|pas|não)\b|n['’]t\b|\brather\s+than\b|\binstead\s+of\b|\bother\s+than\b|"
    r"\banything\s+but\b|\bcompared\s+(?:with|to)\b|\brul(?:e|es|ed|ing)\s+out\b|\beliminat\w*|\bexclud\w*|\breject\w*|"
    r"\bno\s+es\b|不[会會要应應能该該]{0,3}(?:是|选|選)|而非|并非|並非",
    re.I,
)
NEGATION_REACH = 3
#: A negated thought reaches the end of its clause, however many words stand between:
#: "I don't really think it's C", "I do not honestly believe it is C".
NEGATED_THOUGHT = re.compile(
    r"(?:n['’]t|\bnot|\bnever)\s+(?:\w+\s+){0,2}?(?:think|believe|feel|say|agree|reckon|"
    r"suppose|expect)\b",
    re.I,
)
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
    r"[)\]）*_`\"'”’」』]*\s*[:\-–—]?\s*(?:(?:(?:is|was|seems|looks|sounds|feels|would\s+be|are|"
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
    r"[)\]）*_`\"'”’」』]*(?:\s+\S+){0,6}?\s+(?:also\b|too\s*(?=[.,;!?]|$)|"
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

#: Between the two letters of a hedge: "A or B", "B/C", "A vs B", "B 或 C", "B还是C", "BかC".
HEDGE_OR = (
    r"\s*,?\s*(?:or|/|oder|ou|o|或者?|或是|还是|還是|か|vs\.?|versus)\s*"
    r"(?:(?:maybe|perhaps|possibly|probably|even|also)\s+)?"
)
#: Before a hedge whose letters are joined by "and": "between A and B", "both B and C".
HEDGE_BETWEEN = r"\b(?:either|between|both)\s+"
HEDGE_AND = r"\s*,?\s*(?:or|and|&)\s*"
#: Between two letters chosen together, which is no one answer: "I'd say B and C", "选B和C".
PAIR_AND = r"\s*(?:and|&|plus|和|与|與|及|跟)\s*"
#: What may follow a committed letter in a reply cut at the cap for the letter to be written
#: ("C, because", "D. The", "A is correct"): not "or" ("an", "no"), which may go on "or C".
SETTLED = re.compile(
    r"[)\]）*_`\"'”’」』]*(?:\s*(?:[.,;:!?\n—–(（]|-\s)|"
    r"\s+(?!(?:or|an|and|no|nor|vs|versus|oder|ou)\b)[^\W\d_]{2,})",
    re.I,
)
#: What may follow a lower-case letter for it to be an option ("answer: c", "(b)."), never a
#: word ("Answer: a good image").
CLOSED = re.compile(r"[)\]）]?[*_`\"']*\s*(?:$|[.,;:!?)\]）\n]|\s[-–—(（])")

#: A reply that says it cannot see the image: no answer, whatever letters it names in general
#: terms ("As a text-only model I can't see the photo, but in general motion blur (B) ...").
#: Seeing it badly is seeing it: "I can't see the image clearly at this size" is not here.
_IMAGE = r"(?:image|photo|photograph|picture|attachment|attached\s+file|visual)s?\b"
_NOT_BADLY = (
    r"(?!['’]s|\s+(?:clearly|well|sharply|properly|in\s+(?:full|detail)|at\s+(?:this|full)))"
)
CANNOT_SEE = re.compile(
    r"\b(?:I|we)\s*(?:can(?:not|['’]t|\s+not)|am\s+(?:not\s+able|unable)|['’]m\s+(?:not\s+able|"
    r"unable)|(?:do|does)\s+not|don['’]t|am\s+not|['’]m\s+not|could(?:n['’]t|\s+not)|"
    r"was(?:n['’]t|\s+not)\s+able|have\s+no\s+way\s+to)\s+(?:to\s+)?(?:actually\s+)?"
    r"(?:see|view|access|open|look\s+at|process|perceive|analy[sz]e|examine|inspect|load)\s+"
    r"(?:(?:the|this|that|your|any|an)\s+)?(?:provided\s+|attached\s+|uploaded\s+)?"
    + _IMAGE
    + _NOT_BADLY
    + r"|"
    r"\b(?:I|we)\s*(?:do\s+not|don['’]t|does\s+not)\s+have\s+(?:access\s+to\s+)?(?:the|this|"
    r"that|your|any|an)\s+" + _IMAGE + r"|"
    r"\btext[-\s]only\s+(?:model|assistant|ai|language\s+model|system)\b|"
    r"\bas\s+an?\s+(?:ai\s+)?language\s+model\b[^.\n]{0,40}\b(?:see|view)\b|"
    r"\bno\s+(?:image|photo|picture)\s+(?:was\s+|has\s+been\s+|is\s+)?(?:provided|attached|"
    r"uploaded|shared|included|given|visible)\b|"
    r"\b(?:without|unable\s+to)\s+(?:actually\s+)?(?:seeing|viewing|see|view|access(?:ing)?|"
    r"looking\s+at)\s+(?:to\s+)?(?:the|this|your|an?)\s+" + _IMAGE + _NOT_BADLY + r"|"
    r"\b(?:the|your)\s+" + _IMAGE + r"\s+(?:was|is|has)(?:n['’]t|\s+not)\s+(?:been\s+)?"
    r"(?:provided|attached|included|shared|uploaded|loaded|visible\s+to\s+me|shown\s+to\s+me)\b|"
    r"(?:无法|無法|不能|没法|沒法|看不到|看不见|看不見)(?:查看|看到|看|读取|讀取|打开|打開)?"
    r"(?:这张|這張|该|該|您的|你的)?(?:图片|圖片|图像|圖像|照片)|"
    r"(?:没有|沒有|未)(?:提供|上传|上傳|附上)(?:任何)?(?:图片|圖片|图像|圖像|照片)|"
    r"画像(?:を|が)?(?:見る|表示|確認)(?:こと)?(?:が|は)?できません",
    re.I,
)
