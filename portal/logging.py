"""Logging filters for the portal's own settings (LOGGING in portal/settings.py)."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class RefusalsWithoutTraceback(logging.Filter):
    """Django logs a refusal (PermissionDenied, 403) at WARNING with its traceback: the line says
    all there is to say (who was refused is the person's own business, not a bug), so it stays and
    the traceback goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info, record.exc_text = None, None
        return True
