"""How counts read in the tool's lines: ``counted(1, "key")`` is "1 key", ``counted(3, "key")``
"3 keys". Imports nothing of the package."""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural``: the word where an s is wrong)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
