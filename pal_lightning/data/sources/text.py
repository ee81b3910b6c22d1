"""Text clean-up applied while reading: Quora's second quoting layer and PTB tokens.

Both functions are pure ``str -> str`` and safe to apply to any text: a string
without the artefact comes back unchanged (up to whitespace for PTB).
"""

from __future__ import annotations

import re

# PTB bracket and symbol tokens -> the characters they stand for.
_PTB_TOKENS = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "\\/": "/",
    "\\*": "*",
}
_PTB_TOKEN_RE = re.compile("|".join(re.escape(k) for k in _PTB_TOKENS))
# `` opens a quote (glue to the next word), '' closes one (glue to the previous word).
_OPEN_QUOTE_RE = re.compile(r"``\s*")
_CLOSE_QUOTE_RE = re.compile(r"\s*''")
# Clitics split off by the PTB tokenizer: "ca n't", "it 's", "we 're".
_CLITIC_RE = re.compile(r"\s+(n't|'s|'re|'ve|'m|'ll|'d)\b", re.IGNORECASE)
_SPACE_BEFORE_RE = re.compile(r"\s+([,.!?;:%)\]}])")
_SPACE_AFTER_RE = re.compile(r"([(\[{$])\s+")
_WS_RE = re.compile(r"\s+")


def undo_double_quoting(text: str) -> str:
    """Undo one extra layer of CSV quoting, as found in the Quora files.

    Quora text was CSV-escaped twice, so after the file is parsed some fields still read
    ``"What is ""staff work"" in the army?"``: wrapped in quotes with every inner quote
    doubled. Such a field becomes ``What is "staff work" in the army?``. Anything else
    (no wrapping quotes, an unclosed quote, a lone inner quote) is returned unchanged,
    because it cannot be an escaped field.
    """
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    inner = text[1:-1]
    # A valid escaped field holds quotes only in doubled pairs.
    if '"' in inner.replace('""', ""):
        return text
    return inner.replace('""', '"')


def ptb_detokenize(text: str) -> str:
    """Turn Penn-Treebank tokenised text back into ordinary text (SST).

    ``-LRB-``/``-RRB-`` (and square/curly variants) become brackets, ````` `` ``...``''`` ``
    become double quotes, ``\\/`` becomes ``/``, split clitics are re-attached
    (``ca n't`` -> ``can't``, ``it 's`` -> ``it's``) and the space before closing
    punctuation is removed. Leading/trailing whitespace is stripped.
    """
    text = _OPEN_QUOTE_RE.sub('"', text)
    text = _CLOSE_QUOTE_RE.sub('"', text)
    text = _PTB_TOKEN_RE.sub(lambda m: _PTB_TOKENS[m.group(0)], text)
    # "ca n't" -> "can't": PTB splits "can't" as "ca" + "n't" and "won't" as "wo" + "n't".
    text = re.sub(r"\b(ca|wo)\s+n't\b", lambda m: {"ca": "can", "wo": "won"}[m.group(1).lower()] + "'t", text)
    text = re.sub(r"\b(Ca|Wo)\s+n't\b", lambda m: {"Ca": "Can", "Wo": "Won"}[m.group(1)] + "'t", text)
    text = _CLITIC_RE.sub(r"\1", text)
    text = _SPACE_BEFORE_RE.sub(r"\1", text)
    text = _SPACE_AFTER_RE.sub(r"\1", text)
    return _WS_RE.sub(" ", text).strip()
