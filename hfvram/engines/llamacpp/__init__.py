"""llama.cpp: everything hfvram knows about it lives in this folder (``engine.toml``, ``rules.toml``, ``profile.py``)."""
