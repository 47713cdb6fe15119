"""Evaluation harness for many-answer, many-document QA over Wikipedia."""

__version__ = "0.1.0"
