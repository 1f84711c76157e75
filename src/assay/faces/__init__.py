"""The faces of assay: the HTML report, the live dashboard and the MCP server."""
