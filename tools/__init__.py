"""Agent-callable tools: a name -> class registry and each tool's OpenAI function schema.

A tool class has class attributes ``name``, ``description`` and ``parameters`` (a JSON schema
object) and is registered with ``@register_tool``. ``tool_schema(name)`` gives the
``{"type": "function", "function": {...}}`` entry that goes into a chat request's ``tools``.
"""

from harness.tools.registry import TOOLS, function_schema, register_tool, tool_schema
from harness.tools import search as _search  # noqa: F401, E402  (registers "search")

__all__ = ["TOOLS", "function_schema", "register_tool", "tool_schema"]
