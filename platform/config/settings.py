"""Django settings, all from the environment (docs/configuration.md lists every variable).

Strict helpers: a malformed value (``DJANGO_DEBUG=maybe``) stops the process with a message naming the
variable, instead of silently falling back to a default.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.queues import queues
from config.secret_key import stored_key

BASE_DIR = Path(__file__).resolve().parents[2]  # the repository root (platform/config/settings.py)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of {sorted(_TRUE | _FALSE)}, got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None


def env_positive(name: str, default: int) -> int:
    """A limit: an integer of at least 1."""
    value = env_int(name, default)
    if value < 1:
        raise ImproperlyConfigured(f"{name} must be at least 1, got {value}")
    return value


def env_list(name: str, default: str, sep: str = ",") -> list[str]:
    return [item.strip() for item in env_str(name, default).split(sep) if item.strip()]


# ---- core -------------------------------------------------------------------------------------------

DEBUG = env_bool("DJANGO_DEBUG", False)
"""Off unless asked for: its pages show tracebacks and settings, and its 404 page every URL of the site.
The test environment turns it on (tests/platform/support.py); `make demo` runs without it."""
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

DAPO_VAR_DIR = Path(env_str("DAPO_VAR_DIR", str(BASE_DIR / "var"))).resolve()
DAPO_VAR_DIR.mkdir(parents=True, exist_ok=True)  # SQLite cannot create its file in a missing folder
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "") or stored_key(DAPO_VAR_DIR)
"""DJANGO_SECRET_KEY, else a key generated once into DAPO_VAR_DIR/secret_key (config/secret_key.py)."""
DAPO_MODEL_ROOTS = [
    Path(p).resolve()
    for p in env_list("DAPO_MODEL_ROOTS", f"{BASE_DIR / 'assets'}:{DAPO_VAR_DIR / 'models'}", sep=":")
]
DAPO_RUNS_DIR = DAPO_VAR_DIR / "runs"
DAPO_DATASET_ROOTS = [
    Path(p).resolve()
    for p in env_list("DAPO_DATASET_ROOTS", f"{BASE_DIR / 'assets'}:{DAPO_VAR_DIR / 'datasets'}", sep=":")
]
"""Folders under which the dataset page may register files (uploads are kept in DAPO_VAR_DIR/datasets)."""
DAPO_MAX_UPLOAD_MB = env_int("DAPO_MAX_UPLOAD_MB", 512)
"""Largest dataset file an upload may send; the upload stops (and is deleted) as soon as it passes this."""
if DAPO_MAX_UPLOAD_MB < 1:
    raise ImproperlyConfigured(f"DAPO_MAX_UPLOAD_MB must be at least 1, got {DAPO_MAX_UPLOAD_MB}")
DAPO_DATASET_MAX_ROWS = env_positive("DAPO_DATASET_MAX_ROWS", 5_000_000)
"""Rows one imported dataset file may hold, repeats included (DAPO-Math-17k's parquet has 1.8M)."""
DAPO_DATASET_MAX_FIELD_CHARS = env_positive("DAPO_DATASET_MAX_FIELD_CHARS", 100_000)
"""Characters one value of an imported row may hold (a prompt's message, an answer, any other column)."""
DAPO_DATASET_MAX_MB = env_positive("DAPO_DATASET_MAX_MB", 4096)
"""Decompressed data one imported file may hold (parquet: its text written out; JSON lines: the file)."""
DAPO_API_MAX_BODY_BYTES = env_int("DAPO_API_MAX_BODY_BYTES", 1_048_576)
"""Largest JSON body the API reads (a run's whole config is a few kB); larger bodies get 413."""
DAPO_RUNNER = env_str("DAPO_RUNNER", "dapo.loop.runner:run")
"""module:function of the trainer entry point the worker calls (a custom trainer can be plugged in)."""
DAPO_LEASE_SECONDS = env_int("DAPO_LEASE_SECONDS", 120)
"""A run's lease lasts this long without a heartbeat; a dead worker's run can be claimed again after it."""
DAPO_REAPER_INTERVAL_S = env_int("DAPO_REAPER_INTERVAL_S", 30)
"""Each worker's reaper looks this often for running runs whose lease ran out, and queues them again."""
DAPO_DB_RETRY_S = env_int("DAPO_DB_RETRY_S", 60)
"""How long the worker retries a database write (a step's report, a checkpoint, the final status) while
the database is unavailable, with backoff, before the error counts."""
RAY_ADDRESS = os.environ.get("RAY_ADDRESS", "")
DAPO_QUOTA_RUNS = env_int("DAPO_QUOTA_RUNS", 40)
"""Each user's queued and running runs at once (0: no cap), unless the admin's Run quotas say otherwise."""
DAPO_QUOTA_STEPS = env_int("DAPO_QUOTA_STEPS", 100_000)
"""Each user's queued and running runs' ``optim.total_steps`` summed (0: no cap), unless the admin's Run
quotas say otherwise: one run of 10,000,000 steps would hold a worker for weeks."""
DAPO_QUOTA_RUNNING = env_int("DAPO_QUOTA_RUNNING", 0)
"""Each user's training runs dispatched or running at once (0: no cap); more wait in the platform's queue
(runs.scheduling), unless the admin's Run quotas say otherwise."""
DAPO_QUOTA_GPUS = env_int("DAPO_QUOTA_GPUS", 0)
"""GPUs each user's dispatched and running runs may hold at once (0: no cap); more wait in the queue."""
DAPO_QUOTA_QUEUED = env_int("DAPO_QUOTA_QUEUED", 0)
"""Each user's runs waiting in the platform's queue (0: no cap); a launch past it is refused (409)."""
for _name in (
    "DAPO_QUOTA_RUNS",
    "DAPO_QUOTA_STEPS",
    "DAPO_QUOTA_RUNNING",
    "DAPO_QUOTA_GPUS",
    "DAPO_QUOTA_QUEUED",
):
    if globals()[_name] < 0:
        raise ImproperlyConfigured(f"{_name} must be 0 (no cap) or more, got {globals()[_name]}")

# ---- notifications (notifications) -----------------------------------------------------------------

DAPO_SITE_URL = env_str(
    "DAPO_SITE_URL", f"http://{env_str('DAPO_HOST', '127.0.0.1')}:{env_str('DAPO_PORT', '8000')}"
)
"""The site's address as users open it: notifications link to a run's page under it."""
DAPO_WEBHOOK_URLS = [u for u in env_str("DAPO_WEBHOOK_URLS", "").replace(",", " ").split() if u]
"""URL prefixes (whitespace- or comma-separated) a user's notification webhook must lie under."""
DAPO_NOTIFY_INTERVAL_S = env_int("DAPO_NOTIFY_INTERVAL_S", 5)
"""Each worker's notifier sends due notifications and looks for stalled runs this often."""
if DAPO_NOTIFY_INTERVAL_S < 1:
    raise ImproperlyConfigured(f"DAPO_NOTIFY_INTERVAL_S must be at least 1, got {DAPO_NOTIFY_INTERVAL_S}")
EMAIL_BACKEND = env_str("DJANGO_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("DJANGO_EMAIL_HOST", "")
EMAIL_PORT = env_int("DJANGO_EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("DJANGO_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("DJANGO_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("DJANGO_EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("DJANGO_EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("DJANGO_EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DJANGO_DEFAULT_FROM_EMAIL", "dapo@localhost")
DAPO_EMAIL_NOTIFICATIONS = bool(EMAIL_HOST) or "DJANGO_EMAIL_BACKEND" in os.environ
"""E-mail is offered only when an administrator configured a mail server (or another backend)."""
# Rate limits on mail the site sends on request (runs.throttle), each a count per hour; a refusal is a 429
# that says when to retry, and a throttled notification e-mail is recorded as such on the settings page.
DAPO_NOTIFY_MAIL_PER_HOUR = env_positive("DAPO_NOTIFY_MAIL_PER_HOUR", 30)
"""Notification e-mails (events and tests) per user."""
DAPO_NOTIFY_TEST_PER_HOUR = env_positive("DAPO_NOTIFY_TEST_PER_HOUR", 5)
"""Presses of "Send a test" (page or API) per user."""
DAPO_NOTIFY_VERIFY_PER_HOUR = env_positive("DAPO_NOTIFY_VERIFY_PER_HOUR", 5)
"""Verification links mailed to a new notification address, per user."""
DAPO_RESET_PER_ADDRESS_PER_HOUR = env_positive("DAPO_RESET_PER_ADDRESS_PER_HOUR", 10)
"""Password-reset requests per client address."""
DAPO_RESET_PER_EMAIL_PER_HOUR = env_positive("DAPO_RESET_PER_EMAIL_PER_HOUR", 3)
"""Password-reset requests per e-mail address typed in (whether an account has it or not)."""

HAS_SPECTACULAR = importlib.util.find_spec("drf_spectacular") is not None

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "axes",
    *(["drf_spectacular"] if HAS_SPECTACULAR else []),
    "catalog",
    "runs",
    "notifications",
    "sweeps",
    "inspector",
    "compare",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.security_headers.content_security_policy",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files answer here, compressed when collected
    # pages and JSON gzipped (a run page's 151 KB of HTML and embedded curves: ~20 KB); below WhiteNoise so
    # static files never pass through it. Django adds random bytes to each gzip header against BREACH.
    "django.middleware.gzip.GZipMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "config.error_pages.friendly_not_found",  # our 404 page (with a way back) while debugging too
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: turns a lockout into its response
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# ---- database ---------------------------------------------------------------------------------------

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{DAPO_VAR_DIR / 'db.sqlite3'}"), conn_max_age=0
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while the worker writes; IMMEDIATE takes the write lock at BEGIN so
    # two writers queue on the busy timeout instead of failing with "database is locked" mid-transaction.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL",
        "transaction_mode": "IMMEDIATE",
        "timeout": env_int("DAPO_SQLITE_TIMEOUT_S", 30),  # seconds a write waits for another's lock
    }
    # A file (not :memory:) so the daphne and Celery subprocesses of the browser tests share it.
    DATABASES["default"]["TEST"] = {
        "NAME": str(Path(tempfile.gettempdir()) / f"dapo-test-{os.getpid()}.sqlite3")
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---- auth, sessions, security ----------------------------------------------------------------------

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/runs/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked account or address before the password
    "django.contrib.auth.backends.ModelBackend",
]
# Login throttling (django-axes): every password login (the login page, /admin/login/) counts its failures
# per account AND per client address; either one reaching the limit locks further attempts for the cool-off,
# even with the right password. A success clears the counters of its account and address.
AXES_FAILURE_LIMIT = env_int("DAPO_LOGIN_FAILURE_LIMIT", 5)
"""Wrong passwords in a row, per account and per address, before logins are refused."""
AXES_COOLOFF_TIME = timedelta(minutes=env_int("DAPO_LOGIN_COOLOFF_MINUTES", 15))
"""How long a locked account or address waits; `manage.py axes_reset` (or the admin) unlocks at once."""
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "runs.account.locked_out"
AXES_VERBOSE = False
if AXES_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured(f"DAPO_LOGIN_FAILURE_LIMIT must be at least 1, got {AXES_FAILURE_LIMIT}")
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_SSL_REDIRECT = env_bool("DJANGO_SSL_REDIRECT", False)
"""Redirect http:// to https://. Off by default: the demo and the compose stack serve plain HTTP."""
if env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", False):
    # Only behind a TLS proxy that sets X-Forwarded-Proto (overwriting what clients send): trust it.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31_536_000 if SECURE_SSL_REDIRECT else 0)
"""HSTS (sent on HTTPS responses only): a year once everything redirects to HTTPS, else off."""
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
CONTENT_SECURITY_POLICY = env_str(
    "DJANGO_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'",
)
"""Sent on every response (runs.account). The pages load scripts only from our static files, never inline;
styles allow 'unsafe-inline' for plotly.js's injected <style> and style="" attributes. Empty: no header."""
CONTENT_SECURITY_POLICY_REPORT_ONLY = env_bool("DJANGO_CSP_REPORT_ONLY", DEBUG)
"""While debugging the browser only reports violations (in its console): browser-test tools evaluate strings
in the page, which script-src 'self' forbids. Enforced otherwise."""

# ---- static files -----------------------------------------------------------------------------------

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "static"]
STATIC_ROOT = Path(env_str("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
WHITENOISE_USE_FINDERS = True  # serve straight from frontend/static without collectstatic in development
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # hashed names, gzip copies and immutable caching once collected (config/static_storage.py)
    "staticfiles": {"BACKEND": "config.static_storage.StaticStorage"},
}
DAPO_STATIC_HASHED = env_bool("DAPO_STATIC_HASHED", not DEBUG)
"""Pages name the fingerprinted copies that collectstatic wrote (cached for good); off: the plain files."""
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on a missing one before collectstatic

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# ---- Redis: Celery broker and the channel layer -----------------------------------------------------

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
DAPO_QUEUE = queues(os.environ).training.name
"""The Celery queue of training runs (tests use one of their own, so concurrent test runs never mix)."""
DAPO_SHORT_QUEUE = env_str("DAPO_SHORT_QUEUE", "")
"""The queue of exports and evaluations when set; else derived from DAPO_QUEUE (config.queues)."""
queues(os.environ)  # a short queue named like the training queue fails at start, not at the first export
DAPO_SCHEDULER_SLOTS = env_positive("DAPO_SCHEDULER_SLOTS", queues(os.environ).training.concurrency)
"""Training runs the platform's scheduler dispatches to Celery at once (runs.scheduling): the training
queue's worker slots (DAPO_TRAINING_CONCURRENCY) unless set; a run past it waits in the platform's queue,
where its page says why, instead of invisibly in Celery's."""
DAPO_NODE_LOSS_REQUEUES = env_int("DAPO_NODE_LOSS_REQUEUES", 3)
"""Times a run that lost a Ray node goes back to the queue (it resumes from its last checkpoint) before
the next loss fails it."""
if DAPO_NODE_LOSS_REQUEUES < 0:
    raise ImproperlyConfigured(f"DAPO_NODE_LOSS_REQUEUES must be 0 or more, got {DAPO_NODE_LOSS_REQUEUES}")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # socket_timeout None: a quiet run must not time the group receive loop out (redis 7.4.1 pinned).
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
            "capacity": 1000,
            "prefix": env_str("DAPO_CHANNEL_PREFIX", "asgi"),
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_DEFAULT_QUEUE = DAPO_QUEUE
CELERY_TASK_ROUTES = {"worker.tasks.*": {"queue": DAPO_QUEUE}}  # runs.dispatch names the queue of each task
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-run leaves the message to be redelivered
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # one run at a time per worker process
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("DAPO_VISIBILITY_TIMEOUT", 3600)}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Keep the real stdout/stderr in tasks: ray.init calls faulthandler.enable(), which needs a file descriptor
# that Celery's logging proxy lacks (a run on the Ray backend failed at once). Output still reaches the log.
CELERY_WORKER_REDIRECT_STDOUTS = False

# ---- REST API ---------------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["runs.parsers.BoundedJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    **({"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"} if HAS_SPECTACULAR else {}),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "DAPO platform API",
    "DESCRIPTION": "Create, watch and cancel DAPO runs; read their metrics and samples.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema is an API endpoint like the others: a session or a token, else 401.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("DJANGO_LOG_LEVEL", "INFO")},
    # django-axes logs every login at INFO; lockouts come at WARNING, which is what an operator needs.
    "loggers": {"axes": {"level": env_str("DAPO_AXES_LOG_LEVEL", "WARNING")}},
}
