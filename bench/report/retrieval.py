"""The report's "Retrieval" section: the long-context retrieval check recorded with the
answer fingerprint (bench.run.retrieval), and whether it says anything about this model."""

from __future__ import annotations

import html

from bench.answers import Fingerprint


def retrieval_section(fp: Fingerprint | None) -> str:
    r = fp.retrieval if fp is not None else None
    if r is None:
        return (
            "<h2>Retrieval</h2><p class='note'>No long-context retrieval check in this run "
            "(made before results schema 4, or with --no-fingerprint).</p>"
        )
    head = (
        "Context",
        "Prompt tokens",
        "Code at token (about)",
        "Status",
        "Found",
        "Answer (start)",
    )
    rows = []
    for c in r.contexts:
        depth = "—"
        if c.depth_tokens is not None and c.depth_share is not None:
            depth = f"{c.depth_tokens:,} ({c.depth_share:.1%})"
        cells = (
            c.name,
            "—" if c.prompt_tokens is None else f"{c.prompt_tokens:,}",
            depth,
            c.status,
            {True: "found", False: "not found", None: "—"}[c.found],
            c.head,
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in cells) + "</tr>")
    verdict = (
        f"Not informative: {html.escape(r.note)}; a compare draws no verdict from it."
        if r.note is not None
        else "<code>bench compare</code> calls a B that loses retrieval A has one that answers "
        "differently."
    )
    return (
        "<h2>Retrieval</h2><p class='note'>"
        f"Code {html.escape(r.code)} (from seed {r.seed}) planted after {r.needle_words} filler "
        f"words of every context prompt; found at {r.found} of {len(r.contexts)} long contexts "
        f"(at least {r.long_min_tokens:,} prompt tokens). {verdict}</p>"
        "<table><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
