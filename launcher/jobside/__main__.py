"""``python -m launcher.jobside CMD``: the job-side commands (see ``launcher.jobside.cli``)."""

import sys

from launcher.jobside.cli import main

sys.exit(main())
