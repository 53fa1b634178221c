"""Ollama's start-up log: its runner is llama.cpp's, and so are the buffer lines ``hfvram calibrate`` reads
(docs/engines/common.md#calibration-logs-others), read with llama.cpp's reader. There is no ``recognises``: a log of
those lines is taken for llama.cpp's unless ``--engine ollama`` says otherwise. Imported only when a log is read.
"""

from __future__ import annotations

from hfvram.engines.llamacpp.log import parse_llamacpp_log

#: the reader hfvram.calibrate.logs.parse_log calls for this engine
parse = parse_llamacpp_log
