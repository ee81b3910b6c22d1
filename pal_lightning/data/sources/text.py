"""Text clean-up applied while reading (pure ``str -> str``; text without the artefact is unchanged)."""

from __future__ import annotations

import re

_PTB_TOKENS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}
_PTB_TOKENS.update({"\\/": "/", "\\*": "*"})
_PTB_TOKEN_RE = re.compile("|".join(re.escape(k) for k in _PTB_TOKENS))
_OPEN_QUOTE_RE = re.compile(r"``\s*")
_CLOSE_QUOTE_RE = re.compile(r"\s*''")
_CLITIC_RE = re.compile(r"\s+(n't|'s|'re|'ve|'m|'ll|'d)\b", re.IGNORECASE)
_SPACE_BEFORE_RE = re.compile(r"\s+([,.!?;:%)\]}])")
_SPACE_AFTER_RE = re.compile(r"([(\[{$])\s+")
_WS_RE = re.compile(r"\s+")


def undo_double_quoting(text: str) -> str:
    """Undo the second CSV quoting of Quora fields: ``"a ""b"" c"`` -> ``a "b" c``; anything that cannot be
    an escaped field is returned unchanged."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    inner = text[1:-1]
    if '"' in inner.replace('""', ""):
        return text
    return inner.replace('""', '"')


def ptb_detokenize(text: str) -> str:
    """Penn-Treebank tokenised text (SST) back to ordinary text: brackets, quotes, ``/``, clitics, spaces."""
    text = _OPEN_QUOTE_RE.sub('"', text)
    text = _CLOSE_QUOTE_RE.sub('"', text)
    text = _PTB_TOKEN_RE.sub(lambda m: _PTB_TOKENS[m.group(0)], text)
    text = re.sub(r"\b(ca|wo)\s+n't\b", lambda m: {"ca": "can", "wo": "won"}[m.group(1).lower()] + "'t", text)
    text = re.sub(r"\b(Ca|Wo)\s+n't\b", lambda m: {"Ca": "Can", "Wo": "Won"}[m.group(1)] + "'t", text)
    text = _CLITIC_RE.sub(r"\1", text)
    text = _SPACE_BEFORE_RE.sub(r"\1", text)
    text = _SPACE_AFTER_RE.sub(r"\1", text)
    return _WS_RE.sub(" ", text).strip()
