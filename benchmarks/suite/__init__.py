"""The sections of ``benchmarks/bench.py``, one module each (see its docstring)."""
