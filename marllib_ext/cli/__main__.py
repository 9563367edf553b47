import sys

from marllib_ext.cli import main

sys.exit(main())
