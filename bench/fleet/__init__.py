"""A fleet report: one sweep run on several nodes, per cell every node and who stands out.

report       FleetReport: per cell every node, and who stands out
rule         the outlier rule, per figure
calibration  the rule's multipliers, by simulation (outlier_k.json)
nodes        loading the nodes' runs: verified bundles, environment facts, GPU clocks, names
words        the findings, noise, settings and rule in sentences
tables       the report as tables (the verdicts' `VerdictTable` data), as Markdown
page         the report as one self-contained HTML page, strip plots inline
command      `bench fleet`
"""
