"""rltrain's version, apart from the package so that any module can read it."""

__version__ = "0.1.0"
