"""Developer harnesses, not shipped: the performance benchmark (`make perf`), the twin's
calibration (`make twin-calibration`), reproduce/compare on the twin (`make reproduce-twin`,
`make compare-twin`) and the verdicts' measured error rates (`make verdict-power`).

They live outside the `bench` package, so neither the wheel nor the images carry them.
"""
