from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # django.contrib.sessions owns the label "sessions".
    label = "mcp_sessions"
    verbose_name = "Live MCP sessions"
