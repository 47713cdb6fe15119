"""Agent-callable tools: a name -> class registry and each tool's OpenAI function schema.

A tool class has class attributes ``name``, ``description`` and ``parameters`` (a JSON schema
object) and is registered with ``@register_tool``. ``tool_schema(name)`` gives the
``{"type": "function", "function": {...}}`` entry that goes into a chat request's ``tools``.
"""

from __future__ import annotations

from typing import Any

from harness.registry import Registry

TOOLS: Registry[type] = Registry("tool")


def register_tool(cls: type) -> type:
    """Class decorator: registers ``cls`` under ``cls.name``."""
    return TOOLS.register(cls.name)(cls)


def function_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completions tool entry."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI function schema of the registered tool ``name``."""
    cls = TOOLS.get(name)
    return function_schema(cls.name, cls.description, cls.parameters)


from tools import search as _search  # noqa: F401  (registers "search")

__all__ = ["TOOLS", "function_schema", "register_tool", "tool_schema"]
