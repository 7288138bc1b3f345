"""Campaign Board: the server that holds an optimization campaign and its trials."""

__version__ = "0.1.0"
