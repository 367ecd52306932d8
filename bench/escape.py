"""The one home of rule 2 of issue 29: text from outside (a server's error body, a model id,
a version, an archive member's name) is escaped where it is rendered.

    md_cell(text)     a Markdown table cell: `|` as `\\|`, CR and LF as spaces, so a reason
                      can never end its row and forge the next one (H10); other control
                      characters as `terminal` writes them
    terminal(text)    a line for a terminal: control characters (ESC, CR, LF, BEL, ...)
                      written as their escapes (`\\x1b`), never sent raw (M3)
    clipped(text, n)  `terminal`, and at most n characters (the last one `…` when cut):
                      a name from a database on a page whose size is bounded
    csv_cell(value)   a spreadsheet cell: text starting with = + - @ (or a tab or CR)
                      prefixed with `'`, so it is never a formula (M2, OWASP)

HTML is escaped by html.escape where pages are made (the `page` modules of bench.report,
bench.verdict and bench.fleet).
"""

from __future__ import annotations

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def md_cell(text: str) -> str:
    flat = text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    return terminal(flat).replace("|", "\\|")


def terminal(text: str) -> str:
    return "".join(
        c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def clipped(text: str, limit: int) -> str:
    flat = terminal(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def csv_cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value
