import sys

from provisioning.cli import main

sys.exit(main())
