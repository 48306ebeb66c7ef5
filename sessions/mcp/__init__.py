"""The portal's MCP client layer: the only code that imports the `mcp` SDK.

Nothing here knows about Django. Django code hands in plain dataclasses
(`ServerConfig`) and callbacks, and gets plain dicts back, so this package can be
tested and benchmarked against real servers on its own.
"""
