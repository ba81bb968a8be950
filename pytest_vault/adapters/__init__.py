"""Adapters: our bank's tools in agent frameworks, and the bank as an MCP server.

Each adapter hands every tool call to `AgentContext.call_tool` (or, for MCP, to a bank
of its own) with the arguments exactly as the model sent them: no framework validation
or coercion in between, so the suite's strict reader decides what a string amount or a
duplicate key means. Each needs its extra (`pip install 'pytest-vault[pydantic-ai]'`,
`[openai-agents]`, `[mcp]`) and is imported only when used.
"""
