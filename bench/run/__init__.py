"""The measuring engine's sweep: `bench run`, from a plan of cells to results.json.

command       `bench run`: the server's facts, the plan, the sweep, the run directory
options       `bench run`'s words: its options, their checks, the RunSettings they make
plan          the published cells and what runs of them (contexts x concurrencies x trials)
capacity      which cells fit the server's KV cache (the over-capacity set)
presize       each row's prompt sized (/tokenize, else a line fitted to two probes), early
              during the previous row's scout
prompts       the synthetic prompts (unique per request, so no prefix cache helps)
server_info   what the server says about itself (/version, /v1/models, /metrics)
sweep         the cells in order, with readiness holds, warm-up and telemetry; saves
              results.json and renders tables.md after every change (`save`)
fingerprint   what the server answers to a fixed prompt set, before the first row
answer_body   one answer of the fingerprint read from hostile JSON
answer_paths  whether an answer kept the launch's promise (reasoning field, tool call)
launch_paths  which paths the server's launch promises (its parser flags)
retrieval     the long-context retrieval check: a code planted in the context prompts
cell          one cell: C streams launched together, the measured window, its records
outcome       a scout's or cell's results entry (failures counted by kind), its raw lines
figures       a cell's figures from its records (the published definitions)
progress      the sweep's progress lines and ETA
resume        which cells a resumed run may keep
rundir        the run directory: results.json and its INCOMPLETE marker, the records
card_tables   the card's three tables rendered from results.json (tables.md)
decode_notes  notes under those tables (spec-decode acceptance, prefix-cache hits)
workload_run  `bench run --workload`: the workload's points instead of the matrix
workload_text  a workload request's prompt, drawn length and seed to text
slo_capacity  `bench capacity`: searches for the highest rate within an SLO, their estimate
gpu_validity  which cells' windows saw GPU throttling or a sagging clock (the gpu_throttled flag)
"""
