"""The tests import the package from this source tree (python/dcpattn), not an installed
copy, and find libdcpattn.so as the package does ($DCPATTN_LIBRARY, else the repository's
build/)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)
sys.path.insert(0, HERE)
