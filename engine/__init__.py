"""voxgate.engine: speech engines behind one small streaming interface (see base.py)."""
