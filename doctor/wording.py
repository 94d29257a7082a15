"""Counts in the user's words: "1 remedy", "2 remedies", never "1 remedies" or "2 rank(s)".

    count(1, "remedy")            -> "1 remedy"
    count(3, "remedy")            -> "3 remedies"
    count(2, "process")           -> "2 processes"
    count(4, "experiment folder") -> "4 experiment folders"   (the last word takes the plural)
    count(2, "was", "were")       -> "2 were"                  (irregular: give the plural)
    noun_for(1, "rank")           -> "rank"                    (for "rank 7" / "ranks 7, 8")

Stdlib only: the gate, the CLI, the TUI and the reports use it.
"""

from __future__ import annotations

_ES = ("s", "x", "z", "ch", "sh")


def plural(noun: str) -> str:
    """The English plural of `noun` (its last word): remedy -> remedies, process -> processes, GPU -> GPUs."""
    head, space, word = noun.rpartition(" ")
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        word = word[:-1] + "ies"
    elif word.endswith(_ES):
        word += "es"
    else:
        word += "s"
    return head + space + word


def noun_for(n: int, noun: str, many: str | None = None) -> str:
    """`noun` as it goes with `n` things, without the number: "rank 7" but "ranks 7, 8"."""
    return noun if n == 1 else (many or plural(noun))


def count(n: int, noun: str, many: str | None = None) -> str:
    """`n` and `noun`, singular for exactly one, else plural (`many`, or `plural(noun)`)."""
    return f"{n} {noun_for(n, noun, many)}"


__all__ = ["count", "noun_for", "plural"]
