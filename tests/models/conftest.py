import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
transformers = pytest.importorskip("transformers", reason="the HF stack: make setup installs it")
