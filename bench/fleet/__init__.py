"""A fleet report: one sweep run on several nodes, per cell every node and who stands out.

report   loading the nodes' runs, the outlier rule, FleetReport
view     the report as Markdown tables and one HTML page
command  `bench fleet`
"""
