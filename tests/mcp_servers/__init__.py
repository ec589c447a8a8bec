"""MCP servers and agents the MCP tests run (built on the ``mcp`` package's server API)."""
