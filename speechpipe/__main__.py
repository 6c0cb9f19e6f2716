import sys

from speechpipe.cli import main

sys.exit(main())
