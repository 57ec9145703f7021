"""Unit tests, laid out like the code: one module's behaviour, in this process or its own subprocesses."""
