"""Built-in strategies, one file each (``harness.strategy.AGENTS`` maps their names to classes).

The interface (``Agent``, ``AgentContext``, ``SampleResult``, ``Knobs``, ``knob``) lives in
``harness.strategy``; modules starting with ``_`` hold what several strategies share.
"""
