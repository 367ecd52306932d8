"""InferenceX's database dump (one row of `benchmark_results`) as a card, and back.

`read` streams the dump's benchmark_results.json (with configs.json and workflow_runs.json
from beside it), picks the one row --select names and makes its card; `export` gives a card
back as InferenceX's per-result row. Each part's docstring says where its format was read.

    values   WHAT, the dump's file and field names, the limits; JSON values as text and numbers
    select   --select's pairs against a row, its config and its workflow run (the side tables)
    figures  a figure's unit, definition and computed_as from its name; their order
    card     one selected row, with its config and workflow run, as a card; `export` back
    dump     `read`: the dump's rows streamed and the one selected; `looks_like`

Refused, each a one-line CardError naming the file: no row or several rows matching the
selection, two rows with one id, a row whose `error` is set (a failed run), a figure whose
name carries an unknown unit or whose value is not a finite number in 0..1e12, a file that
is not UTF-8 or not this format (a zip, another publisher's file, another table).
"""

from bench.publishers.inferencex.card import export
from bench.publishers.inferencex.dump import looks_like, read
from bench.publishers.inferencex.values import WHAT

__all__ = ["WHAT", "export", "looks_like", "read"]
