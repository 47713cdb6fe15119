"""Plain-text prompt templates, one ``NAME.txt`` each (``str.format`` fields); data only.
``harness.templates.load_template`` reads them."""
