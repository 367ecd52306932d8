"""A fleet report: one sweep run on several nodes, per cell every node and who stands out.

report       FleetReport: per cell every node, and who stands out
rule         the outlier rule, per figure
calibration  the rule's multipliers, by simulation (outlier_k.json)
nodes        loading the nodes' runs: verified bundles, environment facts, GPU clocks, names
words        the findings, noise, settings and rule in sentences
view         the report as Markdown tables and one HTML page
command      `bench fleet`
"""
