"""Start the twin as a real process for tests: `with start_twin("tiny") as twin: twin.url`.

The product's own starter (bench.twin.process), so tests start the twin exactly the way
`bench local` and `make reproduce-twin` do.
"""

from bench.twin.process import TwinProcess, start_twin, twin_command

__all__ = ["TwinProcess", "start_twin", "twin_command"]
