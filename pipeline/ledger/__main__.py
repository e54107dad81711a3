import sys

from pipeline.ledger.archive import main

sys.exit(main())
