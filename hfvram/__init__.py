"""hfvram: will this Hugging Face model fit this hardware? Reads the model's real facts and says where every
gigabyte goes."""

__version__ = "0.1.0"
