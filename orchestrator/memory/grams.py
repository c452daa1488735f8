"""The bigram index's tokens: what makes one- and two-character words (記憶, 監督, PM, 猫) findable by index.

FTS5's ``trigram`` tokenizer finds substrings of three characters or more. For
shorter words the memory store keeps a second, contentless FTS5 table whose
tokens are the text's character pairs: ``記憶の`` gives ``記憶`` and ``憶の``, and
the last character of each run of non-space characters pairs with an end mark,
so every character starts one token. A token is written as the two code points
in hex around a ``g`` (``8a18g61b6``; the end mark is ``z``), which any FTS5
tokenizer keeps as one ASCII word. A two-character word is then one exact token,
a one-character word a prefix query (``732bg*``). Text and query are folded with
``str.lower`` alike, so the match is a case-insensitive substring match.

Pure functions: nothing here touches the database. Changing the tokens means
raising ``db.schema.SCHEMA_VERSION``, which rebuilds the index, because deleting from a
contentless table needs the very tokens that were inserted.
"""

from __future__ import annotations

END = "z"  # not a hex digit: "41gz" is "a" at the end of a word


def tokens(text: str) -> str:
    """The distinct bigram tokens of ``text``, space-separated, in first-seen order."""
    folded = text.lower()
    seen: dict[str, None] = {}
    last = len(folded) - 1
    for i, char in enumerate(folded):
        if char.isspace():
            continue
        nxt = folded[i + 1] if i < last else " "
        seen[f"{ord(char):x}g{END if nxt.isspace() else format(ord(nxt), 'x')}"] = None
    return " ".join(seen)


def query(word: str) -> str:
    """The FTS5 query for a word of one or two characters (no spaces)."""
    folded = word.lower()
    if len(folded) == 1:
        return f"{ord(folded):x}g*"
    if len(folded) == 2:
        return f'"{ord(folded[0]):x}g{ord(folded[1]):x}"'
    raise ValueError(f"the bigram index answers words of one or two characters, not {word!r}")
