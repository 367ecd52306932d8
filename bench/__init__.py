"""The measurement side of the appliance: runs inside the container or anywhere.

`bench` never imports `provisioning` (a test enforces it).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("bench")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
