"""Settings from the environment, in the healthchecks style: one helper per type."""

from __future__ import annotations

import os
from pathlib import Path


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def envsecret(name: str) -> str | None:
    """A secret from NAME, or from the file NAME_FILE points at (for Docker/Kubernetes secrets)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return None
