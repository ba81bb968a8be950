"""pytest-vault: payment-agent attacks as pytest tests, judged by an OAP guard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_vault.harness.yours import AgentContext, StepLimit, ToolResult

__version__ = "0.1.0"
__all__ = ["AgentContext", "StepLimit", "ToolResult", "__version__"]

# Public names, re-exported on first use: `import pytest_vault` stays light.
_LAZY = {name: "pytest_vault.harness.yours" for name in ("AgentContext", "StepLimit", "ToolResult")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pytest_vault' has no attribute {name!r}")
