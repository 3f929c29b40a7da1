"""relaycc: a compiler for TVM Relay text models to C."""

__version__ = "0.1.0"
