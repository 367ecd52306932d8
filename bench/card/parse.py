"""Read a published card (page text) into a `Card`, or fail naming the line.

The page text runs headings into neighbouring text: the launch command ends in
"Prefill", table captions are glued to their first row. A heading is recognised on its
own line or glued to the end of the line before, when the line after opens its section.
Metadata blocks are "- Key" / "- Value" pairs under a heading; a value can lose its dash
(the Commit value is a link on the page).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench.card import figures
from bench.card import sections as tables
from bench.card.figures import FigureError
from bench.card.model import Card, CardMeasurement, CardPlan, MatrixCell, PrefillRow
from bench.card.sections import Line, Unreadable
from bench.errors import CardError

TITLE = "Speed test matrix"
LAUNCH = "Launch command"
PREFILL = "Prefill"
DECODE = "Sustained decode"
ALL = "All measurements"
# A heading glued to the line before it is recognised by how its section opens.
_OPENERS = {PREFILL: "prompt tok/s", DECODE: "total tok/s", ALL: None}
_SECTIONS = (LAUNCH, PREFILL, DECODE, ALL)
T = TypeVar("T")
_CONTEXTS = re.compile(
    r"^(?P<head>\S*?) contexts? \((?P<ctx>[^)]+)\) × (?P<levels>[0-9]{1,15}) concurrency levels?"
    r" \((?P<conc>[^)]+)\)$"
)


def read_card(path: Path) -> Card:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CardError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise CardError(f"{path}: cannot read the card: {exc.strerror}") from None
    return parse_card(text, source=path.name)


def parse_card(text: str, *, source: str = "card") -> Card:
    try:
        return _parse(text, source)
    except Unreadable as exc:
        raise CardError(
            f"{source} line {exc.line}: expected {exc.what}",
            hint="is this a card's text as copied from the site?",
        ) from None


def _opens(section: str, following: str) -> bool:
    opener = _OPENERS.get(section)
    return following.startswith(opener) if opener else "| Phase |" in following


def _split_headings(raw: list[Line]) -> list[Line]:
    """Detach a heading glued to the end of a line ('... moe_wna16Prefill')."""
    out: list[Line] = []
    for i, (n, text) in enumerate(raw):
        following = raw[i + 1][1] if i + 1 < len(raw) else ""
        for heading in _SECTIONS[1:]:
            if text != heading and text.endswith(heading) and _opens(heading, following):
                out += [(n, text[: -len(heading)].rstrip()), (n, heading)]
                break
        else:
            out.append((n, text))
    return out


def _parse(text: str, source: str) -> Card:
    raw = [(i + 1, t.strip()) for i, t in enumerate(text.splitlines()) if t.strip()]
    lines = _split_headings(raw)
    if len(lines) < 3 or lines[0][1] != TITLE:
        first = lines[0][0] if lines else 1
        raise Unreadable(first, f"the title {TITLE!r} on the first line")
    model, hardware = _model_line(lines[1])
    starts: dict[str, int] = {}
    for i, (n, t) in enumerate(lines):
        if t in _SECTIONS:
            if t in starts:
                raise Unreadable(
                    n, f"the section {t!r} once (it began on line {lines[starts[t]][0]})"
                )
            starts[t] = i
    order = sorted(starts.values())
    first_section = order[0] if order else len(lines)

    def body(name: str) -> list[Line]:
        if name not in starts:
            return []
        begin = starts[name] + 1
        end = next((i for i in order if i > starts[name]), len(lines))
        return lines[begin:end]

    blocks, value_lines = _metadata(lines[3:first_section])
    launch = body(LAUNCH)
    prefill_raw = tables.prefill_rows(body(PREFILL)) if PREFILL in starts else []
    m_contexts: list[str] = []
    m_levels: list[int] = []
    cells: list[MatrixCell] = []
    notes: list[str] = []
    if DECODE in starts:
        section = body(DECODE) or [lines[starts[DECODE]]]
        table = tables.markdown_table(section)
        m_contexts, m_levels, cells = tables.matrix(table, section[0][0])
        notes += [t for _, t in table.notes]
    rows: list[CardMeasurement] = []
    if ALL in starts:
        section = body(ALL) or [lines[starts[ALL]]]
        table = tables.markdown_table(section)
        rows = tables.measurements(table, section[0][0])
        notes += [t for _, t in table.notes if t not in notes]
    if not cells and not rows:
        raise Unreadable(lines[-1][0], f"a {DECODE!r} matrix or an {ALL!r} table")
    engine = blocks.get("Engine", {})
    plan = _plan(lines[2], engine.get("Quantization"), len(m_contexts))
    prefill = [_resolve_prefill(p, rows) for p in prefill_raw]
    _agree(cells, prefill, rows)
    _header_agrees(lines[2][0], plan, m_contexts, m_levels, prefill)
    _rows_cover(cells, prefill, rows, lines, starts)
    return Card(
        source=source,
        title=lines[0][1],
        model=model,
        hardware=hardware,
        plan=plan,
        metadata=blocks,
        gpu_count=_typed(blocks, value_lines, ("Hardware", "GPU count"), figures.grouped_int),
        window_s=_typed(blocks, value_lines, ("Run", "Time per measurement"), figures.duration_s),
        max_output_tokens=_typed(blocks, value_lines, ("Run", "Max output"), _tokens),
        launch_command=" ".join(t for _, t in launch) or None,
        prefill=tuple(prefill),
        matrix_contexts=tuple(m_contexts),
        matrix_concurrencies=tuple(m_levels),
        matrix=tuple(cells),
        measurements=tuple(rows),
        notes=tuple(notes),
    )


def _model_line(line: Line) -> tuple[str, str]:
    n, text = line
    model, sep, hardware = text.partition(" on ")
    if not sep or not model or not hardware:
        raise Unreadable(n, f"'<model> on <hardware>', got {text!r}")
    return model, hardware


def _metadata(lines: list[Line]) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], int]]:
    blocks: dict[str, dict[str, str]] = {}
    where: dict[tuple[str, str], int] = {}
    i = 0
    while i < len(lines):
        n, heading = lines[i]
        if heading.startswith("- "):
            raise Unreadable(n, f"a block heading such as 'Hardware' before {heading!r}")
        if heading in blocks:
            raise Unreadable(n, f"each metadata block once, {heading!r} repeats")
        block: dict[str, str] = {}
        i += 1
        while i < len(lines) and lines[i][1].startswith("- "):
            kn, key = lines[i][0], lines[i][1][2:].strip()
            if i + 1 >= len(lines):
                raise Unreadable(kn, f"a value line after '- {key}'")
            value = lines[i + 1][1]
            value = value[2:].strip() if value.startswith("- ") else value
            if key in block:
                raise Unreadable(kn, f"each key once in block {heading!r}, {key!r} repeats")
            block[key] = value
            where[(heading, key)] = lines[i + 1][0]
            i += 2
        if not block:
            raise Unreadable(n, f"'- Key' / '- Value' lines under the block heading {heading!r}")
        blocks[heading] = block
    return blocks, where


def _tokens(text: str) -> int:
    number, _, unit = text.partition(" ")
    if unit != "tokens":
        raise FigureError(f"'N tokens', got {text!r}")
    return figures.grouped_int(number)


def _typed(
    blocks: dict[str, dict[str, str]],
    where: dict[tuple[str, str], int],
    key: tuple[str, str],
    read: Callable[[str], T],
) -> T | None:
    block, name = key
    if name not in blocks.get(block, {}):
        return None
    try:
        return read(blocks[block][name])
    except FigureError as exc:
        raise Unreadable(where[key], f"{block} / {name} to be {exc}") from None


def _range(n: int, text: str, what: str) -> tuple[str, str]:
    lo, dash, hi = text.partition("–")
    return (lo, hi if dash else lo) if lo else _fail(n, what, text)


def _fail(n: int, what: str, text: str) -> tuple[str, str]:
    raise Unreadable(n, f"{what}, got {text!r}")


def _plan(line: Line, quantization: str | None, matrix_rows: int) -> CardPlan:
    """'vllm · 0.30.1rc1… · INT46 contexts (8K–251K) × 8 concurrency levels (1–128) · prefill at …'.

    The quantization badge is glued to the context count ("INT4" + "6"): split it with the
    Engine block's Quantization, else with the matrix's row count.
    """
    n, text = line
    parts = text.split(" · ")
    if len(parts) < 3:
        raise Unreadable(
            n, f"'engine · version · N contexts (…) × M concurrency levels (…)', got {text!r}"
        )
    m = _CONTEXTS.match(parts[2])
    if not m:
        raise Unreadable(n, f"'N contexts (A–B) × M concurrency levels (X–Y)', got {parts[2]!r}")
    head: str = m.group("head")
    badge: str | None
    after_badge = figures.whole(head[len(quantization) :]) if quantization else None
    if quantization and head.startswith(quantization) and after_badge is not None:
        badge, count = quantization, after_badge
    elif matrix_rows and head.endswith(str(matrix_rows)):
        badge, count = head[: -len(str(matrix_rows))] or None, matrix_rows
    elif (plain := figures.whole(head)) is not None:
        badge, count = None, plain
    else:
        known = f"Engine / Quantization is {quantization!r}" if quantization else "no Quantization"
        raise Unreadable(n, f"a context count after the badge in {head!r} ({known})")
    if count < matrix_rows:
        raise Unreadable(
            n, f"at least the matrix's {matrix_rows} contexts, the header says {count}"
        )
    ctx_lo, ctx_hi = _range(n, m.group("ctx"), "a context range like '8K–251K'")
    c_lo, c_hi = _range(n, m.group("conc"), "a concurrency range like '1–128'")
    if figures.whole(c_lo) is None or figures.whole(c_hi) is None:
        raise Unreadable(n, f"a concurrency range like '1–128', got {m.group('conc')!r}")
    prefill: tuple[str, ...] = ()
    for extra in parts[3:]:
        if not extra.startswith("prefill at "):
            raise Unreadable(n, f"'prefill at 8K, 16K, …' after the levels, got {extra!r}")
        prefill = tuple(p.strip() for p in extra[len("prefill at ") :].split(","))
        bad = [p for p in prefill if not figures.is_context_label(p)]
        if bad:
            raise Unreadable(n, f"prefill contexts like '8K', got {bad[0]!r}")
    return CardPlan(
        engine=parts[0],
        engine_version=parts[1],
        badge=badge,
        decode_context_count=count,
        decode_context_range=(ctx_lo, ctx_hi),
        concurrency_count=int(m.group("levels")),
        concurrency_range=(int(c_lo), int(c_hi)),
        prefill_contexts=prefill,
    )


def _resolve_prefill(row: tables.GluedPrefill, rows: list[CardMeasurement]) -> PrefillRow:
    """Pick the one reading of the glued digits; with several, the All-measurements row for
    the context decides. (The size rule tok/s x TTFT = prompt tokens cannot: every split
    of 'abcd,efg' gives a product of about the same size.)"""
    readings = figures.prefill_splits(row.glued)
    options = readings
    if len(readings) > 1:
        twin = next((r for r in rows if (r.phase, r.context) == ("prefill", row.context)), None)
        if twin is not None and twin.total_tokens_per_s is not None:
            seen = (round(twin.total_tokens_per_s), twin.ttft_s)
            options = [o for o in readings if o == seen]
    if len(options) != 1:
        found = " or ".join(f"{t:,.0f} tok/s + {s * 1000:,.0f} ms" for t, s in readings)
        raise Unreadable(
            row.line,
            f"one reading of {row.glued!r} as tok/s + TTFT, found {found or 'none'}"
            " (an All-measurements Prefill row for the context would settle it)",
        )
    tok_s, ttft_s = options[0]
    return PrefillRow(context=row.context, tokens_per_s=tok_s, ttft_s=ttft_s, line=row.line)


def _header_agrees(
    n: int, plan: CardPlan, contexts: list[str], levels: list[int], prefill: list[PrefillRow]
) -> None:
    """The header line announces the matrix and the prefill contexts: they must be those."""
    if not contexts:
        return
    if plan.decode_context_count != len(contexts):
        raise Unreadable(
            n,
            f"{len(contexts)} contexts as the matrix has, the header says "
            f"{plan.decode_context_count}",
        )
    if plan.concurrency_count != len(levels):
        raise Unreadable(
            n,
            f"{len(levels)} concurrency levels as the matrix has, the header says "
            f"{plan.concurrency_count}",
        )
    if plan.decode_context_range != (contexts[0], contexts[-1]):
        lo, hi = plan.decode_context_range
        raise Unreadable(
            n, f"the context range {contexts[0]}–{contexts[-1]} of the matrix, got {lo}–{hi}"
        )
    if plan.concurrency_range != (min(levels), max(levels)):
        lo2, hi2 = plan.concurrency_range
        raise Unreadable(
            n, f"the concurrency range {min(levels)}–{max(levels)} of the matrix, got {lo2}–{hi2}"
        )
    if plan.prefill_contexts and prefill:
        listed = [p.context for p in prefill]
        if list(plan.prefill_contexts) != listed:
            raise Unreadable(
                n,
                f"prefill at {', '.join(listed)} as the prefill table has, the header says "
                f"{', '.join(plan.prefill_contexts)}",
            )


def _rows_cover(
    cells: list[MatrixCell],
    prefill: list[PrefillRow],
    rows: list[CardMeasurement],
    lines: list[Line],
    starts: dict[str, int],
) -> None:
    """Every matrix cell with figures and every prefill row has its All-measurements row:
    a card cut short (at a row boundary, so every line still reads) must not import with
    per-request tok/s and time between tokens silently null. (Over-capacity and not-run
    cells have no figures to lose.)"""
    if cells and ALL not in starts:
        raise Unreadable(lines[-1][0], f"an {ALL!r} table after the matrix (the card ends here)")
    have = {(r.phase, r.context, r.concurrency) for r in rows}
    last = max((r.line for r in rows), default=lines[-1][0])
    for c in cells:
        if c.status == "valid" and ("decode", c.context, c.concurrency) not in have:
            raise Unreadable(
                last,
                f"an {ALL!r} row for matrix cell {c.context} x {c.concurrency} (line {c.line});"
                " the rows stop here",
            )
    for p in prefill:
        if rows and ("prefill", p.context, 1) not in have:
            raise Unreadable(
                last, f"an {ALL!r} Prefill row for {p.context} (line {p.line}); the rows stop here"
            )


def _agree(cells: list[MatrixCell], prefill: list[PrefillRow], rows: list[CardMeasurement]) -> None:
    """The matrix and the prefill table repeat figures of "All measurements": they must agree."""
    by_key = {(r.phase, r.context, r.concurrency): r for r in rows}
    for c in cells:
        r = by_key.get(("decode", c.context, c.concurrency))
        if r is None:
            continue
        where = f"matrix cell {c.context} x {c.concurrency} to agree with line {r.line}"
        if (c.status == "over_capacity") != r.over_capacity:
            raise Unreadable(c.line, f"{where} (Over capacity on one only)")
        if c.status == "valid" and (c.total_tokens_per_s, c.ttft_s) != (
            r.total_tokens_per_s,
            r.ttft_s,
        ):
            raise Unreadable(
                c.line,
                f"{where}: here {c.total_tokens_per_s} tok/s and {c.ttft_s} s TTFT, "
                f"there {r.total_tokens_per_s} tok/s and {r.ttft_s} s",
            )
    for p in prefill:
        r = by_key.get(("prefill", p.context, 1))
        if r is None or r.total_tokens_per_s is None:
            continue
        if (p.tokens_per_s, p.ttft_s) != (round(r.total_tokens_per_s), r.ttft_s):
            raise Unreadable(
                p.line,
                f"prefill {p.context} to agree with line {r.line}: here {p.tokens_per_s} tok/s"
                f" and {p.ttft_s} s TTFT, there {r.total_tokens_per_s} tok/s and {r.ttft_s} s",
            )
