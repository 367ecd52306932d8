"""The report's "Answers" section: what the server answered to the fingerprint's prompts
before the sweep (bench.answers), so a reader sees what work the figures measured."""

from __future__ import annotations

import html

from bench.answers import Fingerprint

SHOWN_CHARS = 120  # of each answer's text


def answers_section(fp: Fingerprint | None) -> str:
    if fp is None:
        return (
            "<h2>Answers</h2><p class='note'>No answer fingerprint in this run (made before "
            "results schema 3, or with --no-fingerprint).</p>"
        )
    head = ("Prompt", "Prompt tokens", "Status", "Tokens compared", "sha256", "Answer (start)")
    rows = []
    for a in fp.answers:
        compared = f"{len(a.token_ids)} ids ({a.ids_from})" if a.token_ids is not None else "text"
        text = a.text[:SHOWN_CHARS] if a.status == "answered" else (a.reason or "")
        if a.promise is not None and a.promise_held is not None:  # a path the launch promises
            kept = "kept" if a.promise_held else "BROKEN"
            text = f"[{a.promise} promise {kept}: {a.promise_detail or ''}] {text}"
        cells = (
            a.name,
            "—" if a.prompt_tokens is None else f"{a.prompt_tokens:,}",
            a.status,
            compared if a.status == "answered" else "—",
            (a.sha256 or "—")[:16],
            text,
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    answered = sum(a.status == "answered" for a in fp.answers)
    parsers = [
        f"{what} parser {html.escape(name)}"
        for what, name in (("reasoning", fp.reasoning_parser), ("tool-call", fp.tool_call_parser))
        if name is not None
    ]
    launch = f"The launch's {' and '.join(parsers)}: one prompt each. " if parsers else ""
    return (
        "<h2>Answers</h2><p class='note'>"
        f"Fingerprint {html.escape(fp.version)}: {len(fp.answers)} prompts ({answered} answered), "
        f"{fp.max_tokens} tokens each, temperature {fp.temperature:g}, seed {fp.seed}; "
        f"{fp.requests} requests, {fp.server_s:,.1f} s of server time. {launch}"
        "<code>bench compare</code> compares these before the figures.</p>"
        "<table><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
