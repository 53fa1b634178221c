"""The commands of the ``hfvram`` command line, one module each (``gpus`` and ``engines`` share ``catalog``),
registered on the group in ``hfvram.cli``; ``options`` holds the options they share and ``output`` what they print
through. Each module imports only click and hfvram's light modules at start-up; what a command needs (rich, the
readers, the reports) is imported inside it.
"""
