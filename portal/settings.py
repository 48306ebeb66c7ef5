"""Settings, all from the environment.

Two runtime modes share one code path and differ only here:
- embedded (default): SQLite under ./var, in-memory channel layer and broker, the
  Celery worker running as threads inside the portal process (`make run`);
- distributed: DATABASE_URL and REDIS_URL set; PostgreSQL, channels_redis, Celery on
  Redis, with daphne and `celery -A portal worker` as separate processes.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal.env import envbool, envfloat, envint, envlist, envsecret
from portal.site import site_addresses
from portal.stdio_defaults import check_stdio_settings, default_bind_paths, default_commands
from portal.var_dir import private_directory, private_sqlite
from servers.credentials.crypto import KeyConfigError, load_keyring

BASE_DIR = Path(__file__).resolve().parent.parent
# The database and the keys live here: the directory is the owner's alone (portal/var_dir.py).
VAR_DIR = private_directory(Path(os.environ.get("PORTAL_VAR_DIR", BASE_DIR / "var")))

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
if bool(DATABASE_URL) != bool(REDIS_URL):
    raise ImproperlyConfigured("The distributed mode needs both DATABASE_URL and REDIS_URL; set both or neither.")
PORTAL_MODE = "distributed" if DATABASE_URL else "embedded"
EMBEDDED = PORTAL_MODE == "embedded"
TESTING = "pytest" in sys.modules or envbool("PORTAL_TESTING", False)


def _secret_key() -> str:
    key = envsecret("DJANGO_SECRET_KEY")
    if key:
        return key
    if not EMBEDDED:
        raise ImproperlyConfigured("The distributed mode needs DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE).")
    # The embedded mode keeps a generated key beside its database, readable only by its owner.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()

# Credentials at rest (servers/credentials/crypto.py, docs/credentials.md): the current key first.
try:
    PORTAL_KEYRING = load_keyring(EMBEDDED, VAR_DIR)
except KeyConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None
DEBUG = envbool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")
# Where people reach the portal; `runportal` makes it the address it serves on when unset (portal/site.py).
SITE_URL = os.environ.get("SITE_URL") or "http://127.0.0.1:8000"
# The playground's WebSocket accepts the page's own origin (scheme, host and port) and SITE_URL's;
# these are any others (e.g. "https://portal.example.com:8443"), as CSRF_TRUSTED_ORIGINS are for forms.
PORTAL_WEBSOCKET_ORIGINS = envlist("PORTAL_WEBSOCKET_ORIGINS", "")
# Where MCP Apps run (docs/tasks-and-apps.md): an origin of its own (another port or, better, another
# host: cookies are kept per host, not per port) that serves only the apps' sandbox page. Unset: no
# app is shown. `runportal` serves one on the port after its own and makes it this when unset.
PORTAL_APPS_ORIGIN = os.environ.get("PORTAL_APPS_ORIGIN", "").strip().rstrip("/")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "allauth",
    "allauth.account",
    "channels",
    "oauth2_provider",
    "portal",
    "servers",
    "sessions.apps.SessionsConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "portal.middleware.content_security_policy",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
]

ROOT_URLCONF = "portal.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "sessions.context_processors.approvals_waiting",
            ],
        },
    },
]
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = None

if EMBEDDED:
    # The browser tests point a portal process at the test database with PORTAL_SQLITE_PATH.
    SQLITE_PATH = Path(os.environ.get("PORTAL_SQLITE_PATH", VAR_DIR / "portal.sqlite3"))
    private_sqlite(SQLITE_PATH)  # 0600 before SQLite makes it, so its WAL and shared memory are 0600 too
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": SQLITE_PATH,
            # WAL and IMMEDIATE let the worker threads and the web threads write without
            # "database is locked"; the browser tests' portal process shares the test file.
            # synchronous=NORMAL: in WAL mode a commit no longer waits for fsync (the file
            # cannot be corrupted; a power cut may lose the last few commits).
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
            # Keep each thread's connection instead of opening the file (and setting the
            # pragmas) again for every consumer message and every task.
            "CONN_MAX_AGE": None,
            # A file, not memory, so a portal process started by a browser test can share it;
            # one per test run, so two runs on one machine do not drop each other's tables.
            "TEST": {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")},
        }
    }
    CHANNEL_LAYERS = {"default": {"BACKEND": "portal.channel_layer.EmbeddedChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CELERY_BROKER_URL = "memory://"
    # Kombu's memory transport, woken by each new task rather than polling (portal/memory_broker.py);
    # the interval is only the backstop for a wake-up that raced past.
    CELERY_BROKER_TRANSPORT = "portal.memory_broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 0.5}
else:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 60))}
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py's asyncio pool refuses (not waits) past 100 connections by default:
                # 200 browsers connecting at once made Daphne answer HTTP 500 (bench/, 200 users).
                # redis-py's default 5 s socket timeout races channels_redis's 5 s blocking pop: under load a
                # receive then fails while holding its channel lock, and that consumer stops hearing anything.
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": envint("CHANNELS_REDIS_MAX_CONNECTIONS", 2000),
                        "socket_timeout": 30,
                    }
                ],
                "prefix": os.environ.get("CHANNELS_PREFIX", "portal"),
                "capacity": 1000,
            },
        }
    }
    # The prefixes and the queue name let several installations (or test runs) share one Redis.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": os.environ.get("CACHE_PREFIX", ""),
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    # kombu's Redis transport, made to survive a Redis restart (portal/redis_broker.py).
    CELERY_BROKER_TRANSPORT = "portal.redis_broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE", "portal")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Celery's Django fixup closes every database connection before and after each task unless
# this is set, so each tool call paid a new PostgreSQL connection (or SQLite file open).
# Connections now live by CONN_MAX_AGE, checked around each task (sessions/tasks.py).
CELERY_DB_REUSE_MAX = envint("CELERY_DB_REUSE_MAX", 1_000_000)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]

# Accounts (django-allauth)
ACCOUNT_ADAPTER = "servers.adapter.AccountAdapter"
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_LOGOUT_ON_GET = False
# Login and signup rate limits, counted by allauth in the Django cache (Redis in the distributed mode,
# so they hold across web processes). Spelled out rather than left to allauth's defaults: five failed
# logins for one account in five minutes lock it for the rest of them; ten a minute per address.
ACCOUNT_RATE_LIMITS = {
    "login": "30/m/ip",
    "login_failed": "10/m/ip,5/300s/key",
    "signup": "20/m/ip",
    "reset_password": "20/m/ip,5/m/key",
    "change_password": "5/m/user",
}
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "/"
ACCOUNT_LOGOUT_REDIRECT_URL = "/accounts/login/"
# Open signup is for a laptop: closed by default in the distributed mode, where anyone who can reach the
# page could make an account. Either way a new account joins no team (people join by invitation) unless
# the operator names one here, and then as a member, never an admin.
PORTAL_SIGNUP_OPEN = envbool("PORTAL_SIGNUP_OPEN", EMBEDDED)
PORTAL_SIGNUP_TEAM = os.environ.get("PORTAL_SIGNUP_TEAM", "")
# The team `manage.py bootstrap` makes (its first account is the admin, the demo server is registered
# in it), and the one a superuser with no team becomes admin of when they log in.
PORTAL_DEFAULT_TEAM = os.environ.get("PORTAL_DEFAULT_TEAM", "Default team")
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "portal@localhost")

# Cookies and headers. Secure cookies need HTTPS, so they are on where the operator says so.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = envbool("PORTAL_SECURE_COOKIES", not EMBEDDED)
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
# Forms carry the token in a hidden field; no script reads the cookie, so no script may.
CSRF_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
PORTAL_SERVE_STATIC = envbool("PORTAL_SERVE_STATIC", True)

# MCP connections. The handshake timeout (30 s) and the batch sizes (3 local, 20 remote) are
# Claude Code's MCP client defaults.
MCP_CONNECT_TIMEOUT = envfloat("MCP_CONNECT_TIMEOUT", 30.0)
MCP_REQUEST_TIMEOUT = envfloat("MCP_REQUEST_TIMEOUT", 60.0)
MCP_SERVER_CONNECTION_BATCH_SIZE = envint("MCP_SERVER_CONNECTION_BATCH_SIZE", 3)
MCP_REMOTE_SERVER_CONNECTION_BATCH_SIZE = envint("MCP_REMOTE_SERVER_CONNECTION_BATCH_SIZE", 20)
MCP_POOL_MAX_CONNECTIONS = envint("MCP_POOL_MAX_CONNECTIONS", 200)
MCP_POOL_IDLE_SECONDS = envfloat("MCP_POOL_IDLE_SECONDS", 600.0)
PORTAL_WORKER_THREADS = envint("PORTAL_WORKER_THREADS", 8)
PORTAL_WORKER_HEARTBEAT_SECONDS = envfloat("PORTAL_WORKER_HEARTBEAT_SECONDS", 5.0)
# How long a call waits for a person to approve it before it ends as timed out.
PORTAL_APPROVAL_TIMEOUT = envfloat("PORTAL_APPROVAL_TIMEOUT", 300.0)
MCP_HEALTH_CHECK_SECONDS = envfloat("MCP_HEALTH_CHECK_SECONDS", 60.0)
# Outbound limits (docs/security.md). Loopback and private addresses are reachable only where the
# operator says so: on by default in the embedded mode (local servers while developing), off in the
# distributed mode. Cloud metadata, link-local and other special addresses are never reachable.
PORTAL_ALLOW_PRIVATE_NETWORK = envbool("PORTAL_ALLOW_PRIVATE_NETWORK", EMBEDDED)
# stdio servers (docs/security.md, "stdio servers"). The commands team admins may register:
# executables or templates (sessions/mcp/commands.py), comma-separated. Operators (superusers)
# register any command. The embedded mode allows the demo server, the test servers and the
# usual package runners; the distributed mode allows team admins none until the operator says.
PORTAL_STDIO_COMMANDS = envlist("PORTAL_STDIO_COMMANDS", ",".join(default_commands(BASE_DIR, EMBEDDED)))
# Lets team admins register any command, as operators do. Every server still runs in the sandbox,
# but whatever the sandbox shows (the bound paths, the network) is then theirs to use.
PORTAL_STDIO_ANY_COMMAND_FOR_ADMINS = envbool("PORTAL_STDIO_ANY_COMMAND_FOR_ADMINS", False)
# "on" (the default): every stdio server runs in a bubblewrap sandbox, and none starts where
# bubblewrap cannot make one. "off": they run as the portal's own user, seeing all it sees
# (the servers page says so to admins).
PORTAL_STDIO_SANDBOX = os.environ.get("PORTAL_STDIO_SANDBOX", "on").strip().lower() or "on"
if PORTAL_STDIO_SANDBOX not in ("on", "off"):
    raise ImproperlyConfigured("PORTAL_STDIO_SANDBOX is 'on' or 'off'.")
PORTAL_STDIO_BWRAP = os.environ.get("PORTAL_STDIO_BWRAP", "bwrap")
# Host paths shown to stdio servers, comma-separated; `path:rw` for writable. A server's working
# directory and command must be inside what the sandbox shows.
PORTAL_STDIO_BIND_PATHS = envlist("PORTAL_STDIO_BIND_PATHS", ",".join(default_bind_paths(BASE_DIR, EMBEDDED)))
try:
    check_stdio_settings(PORTAL_STDIO_COMMANDS, PORTAL_STDIO_BIND_PATHS)
except ValueError as exc:
    raise ImproperlyConfigured(f"PORTAL_STDIO_COMMANDS or PORTAL_STDIO_BIND_PATHS: {exc}") from None
# Tool calls a person may start in any one minute (sessions/limits.py); 0 turns the limit off.
PORTAL_TOOL_CALLS_PER_MINUTE = envint("PORTAL_TOOL_CALLS_PER_MINUTE", 60)
# The portal's own MCP endpoint (/mcp/, docs/mcp-endpoint.md), and its requests a minute per token.
PORTAL_MCP_ENDPOINT = envbool("PORTAL_MCP_ENDPOINT", True)
PORTAL_ENDPOINT_REQUESTS_PER_MINUTE = envint("PORTAL_ENDPOINT_REQUESTS_PER_MINUTE", 600)
# While a call waits for the person's approval, a client that gave a progress token hears progress this
# often (clients such as Claude Code reset their idle timer on progress).
PORTAL_ENDPOINT_KEEPALIVE_SECONDS = envfloat("PORTAL_ENDPOINT_KEEPALIVE_SECONDS", 10.0)
# How often a handshake-era session's tool list is computed again, to send tools/list_changed (0: never).
PORTAL_ENDPOINT_WATCH_SECONDS = envfloat("PORTAL_ENDPOINT_WATCH_SECONDS", 10.0)
# A call still pending this long after it was queued is queued again (its task was lost, e.g. with
# a broker restart); claiming is a compare-and-set, so a copy that was not lost does nothing.
PORTAL_PENDING_RESEND_SECONDS = envfloat("PORTAL_PENDING_RESEND_SECONDS", 120.0)
# The longest a worker follows a call's MCP task (docs/tasks-and-apps.md); the server's TTL ends most first.
PORTAL_TASK_MAX_SECONDS = envfloat("PORTAL_TASK_MAX_SECONDS", 24 * 3600.0)
# A call's conversation (docs/websocket-protocol.md): how long a form waits for its person, and output limits.
PORTAL_ELICITATION_TIMEOUT = envfloat("PORTAL_ELICITATION_TIMEOUT", 300.0)
MCP_MAX_OUTPUT_TOKENS = envint("MCP_MAX_OUTPUT_TOKENS", 25_000)
MCP_FULL_OUTPUT_MAX_BYTES = envint("MCP_FULL_OUTPUT_MAX_BYTES", 20 * 1024 * 1024)

# OAuth to upstream MCP servers (docs/credentials.md)
_site = site_addresses(SITE_URL, os.environ)
PORTAL_OAUTH_REDIRECT_URI = _site["PORTAL_OAUTH_REDIRECT_URI"]
PORTAL_OAUTH_CLIENT_METADATA_URL = _site["PORTAL_OAUTH_CLIENT_METADATA_URL"]
PORTAL_OAUTH_REFRESH_AHEAD_SECONDS = envfloat("PORTAL_OAUTH_REFRESH_AHEAD_SECONDS", 60.0)
PORTAL_OAUTH_REFRESH_JITTER_SECONDS = envfloat("PORTAL_OAUTH_REFRESH_JITTER_SECONDS", 30.0)
PORTAL_OAUTH_FLOW_SECONDS = envfloat("PORTAL_OAUTH_FLOW_SECONDS", 300.0)
PORTAL_NEEDS_AUTH_SECONDS = envint("PORTAL_NEEDS_AUTH_SECONDS", 15 * 60)
# The portal's environment variables a server's ${VAR} may read (comma-separated names); none by
# default: a team admin is not trusted with the operator's environment (docs/security.md).
PORTAL_SERVER_VARIABLES = envlist("PORTAL_SERVER_VARIABLES", "")

# The portal as the OAuth 2.1 authorization server of its own MCP endpoint (sessions/oauth_server.py,
# docs/mcp-endpoint.md): authorization code with PKCE (S256 only) and refresh tokens, for public
# clients that register themselves; every token is bound to the one endpoint it was asked for.
OAUTH2_PROVIDER = {
    "SCOPES": {"mcp": "Act as you on the portal's MCP endpoint: call your team's servers within your rules"},
    "DEFAULT_SCOPES": ["mcp"],
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,  # "plain" refused
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,  # tokens in the header, never the query
    # Only digests of tokens are stored, as for personal access tokens.
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "ACCESS_TOKEN_EXPIRE_SECONDS": envint("PORTAL_OAUTH_ACCESS_TOKEN_SECONDS", 3600),
    "REFRESH_TOKEN_EXPIRE_SECONDS": envint("PORTAL_OAUTH_REFRESH_TOKEN_SECONDS", 30 * 24 * 3600),
    "ROTATE_REFRESH_TOKEN": True,
    # A refresh token used twice was stolen (or replayed): every token of that chain is revoked.
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    # Always ask: a client registered by anyone must not be let through on an earlier consent.
    "REQUEST_APPROVAL_PROMPT": "force",
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    # RFC 8252 §7.3: a native client's loopback redirect may name any port; "localhost" as well
    # as 127.0.0.1 and [::1], since Claude Code and others register it.
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none"],
    # Client ID metadata documents: a client_id that is an https URL is read from there, through
    # the outbound policy (PORTAL_ALLOW_PRIVATE_NETWORK), at most 16 KB within 5 s.
    "CIMD_ENABLED": envbool("PORTAL_OAUTH_CLIENT_ID_METADATA_DOCUMENTS", True),
    "CIMD_METADATA_FETCHER": "sessions.oauth_server.ClientMetadataFetcher",
    "CIMD_FETCH_TIMEOUT_SECONDS": 5,
    "CIMD_MAX_DOCUMENT_SIZE": 16 * 1024,
}
# Certificates a client ID metadata document's server is checked against, if not the system's.
PORTAL_OAUTH_CIMD_CA_FILE = os.environ.get("PORTAL_OAUTH_CIMD_CA_FILE", "")
# Dynamic client registrations one address may make in a minute (sessions/oauth_server.py).
PORTAL_OAUTH_REGISTRATIONS_PER_MINUTE = envint("PORTAL_OAUTH_REGISTRATIONS_PER_MINUTE", 10)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"refusals": {"()": "portal.logging.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"filters": ["refusals"]},
        "httpx2": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        # Their debug lines carry request bodies (codes, tokens): never below WARNING.
        "oauthlib": {"level": "WARNING"},
        "oauth2_provider": {"level": "WARNING"},
        # Celery's two lines per task ("received", "succeeded in"): every call is recorded, with its
        # times, in the database; at hundreds of calls a second these lines cost CPU and say nothing more.
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
    },
}
