"""The tool registry and each tool's OpenAI function schema (``tools`` re-exports them); tool
modules import this, never the package, so registering a tool closes no import circle."""

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
