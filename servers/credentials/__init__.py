"""Credentials: what people connect to servers with, kept encrypted, and how they are set and connected.

models (imported by servers/models.py, so ordinary models of the `servers` app), crypto (no Django:
settings load it, so this package imports nothing), actions (every decision and write), forms,
views and urls (the pages), oauth_errors (what an authorization server's refusal means).
"""
