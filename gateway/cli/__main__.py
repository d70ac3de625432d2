"""`python -m voxgate.gateway.cli`: what the bench and the supervisor start a gateway with."""

import sys

from .main import main

sys.exit(main())
