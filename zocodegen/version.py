"""The version, in its own module so that the core can name it without importing the
package (whose API loads the command line)."""

__version__ = "0.1.0"
