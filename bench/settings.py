"""Settings for the portal processes the bench starts: the portal's own, for logging many accounts in.

The bench logs every one of its accounts (up to 206) in through the real login form, from one
address in a few seconds. With the default PBKDF2 (about 0.7 s of CPU per login here) that
would cost minutes before the first tool call, and allauth's per-address login rate limit
would refuse most of them. The path under measurement never hashes a password nor checks
a rate limit, so nothing measured changes.
"""

from portal.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ACCOUNT_RATE_LIMITS = False
