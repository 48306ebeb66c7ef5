"""An MCP server written with the 1.x SDK (handshake era only), run from its own venv (tests/requirements-mcp1.txt)."""

from mcp.server.fastmcp import FastMCP

server = FastMCP("v1-test")


@server.tool()
def hello(name: str = "world") -> str:
    """Say hello."""
    return f"hello {name} from mcp 1.x"


if __name__ == "__main__":
    server.run("stdio")
