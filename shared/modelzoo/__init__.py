"""Meridian's model zoo: real model families built here, with the profiler that measures them.

- `shared.modelzoo.digits`: the ``digits`` family (MLPs and CNNs for scikit-learn's 8x8 digits).
- `shared.modelzoo.profiler`: latency / load time / memory / accuracy of an ONNX model per provider.
- `shared.modelzoo.build`: trains, exports and profiles the family, run as
  ``make models``; the built files are committed in ``profiles/digits/``.

Nothing here imports torch at import time; only training and export do.
"""
