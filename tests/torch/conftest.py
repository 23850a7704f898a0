"""The example models (examples/torch_models.py) and the training helpers of these tests
(training.py) are importable from them."""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples")
HERE = str(Path(__file__).resolve().parent)
for path in (EXAMPLES, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)
