"""Where a model's bytes come from: the Hub, a local folder or .gguf, the HF cache, the facts cache,
the embedded catalogue. ``load_model`` is the one entry point."""

from hfvram.sources.resolve import load_model, parse_source

__all__ = ["load_model", "parse_source"]
