"""``python3 -m tunehost`` is ``python3 -m tunehost.worker``: the function-API worker."""

import sys

from tunehost.function import main

sys.exit(main())
