"""Settings for gpusched: one file, configured by environment variables.

GPUSCHED_DEBUG          "1"/"true" enables debug mode (default off).
GPUSCHED_SECRET_KEY     required when debug is off; a fixed development key is used in debug mode.
GPUSCHED_ALLOWED_HOSTS  comma-separated host names (default: loopback only).
GPUSCHED_LOG_LEVEL      root log level (default INFO).
GPUSCHED_LOG_FORMAT     "plain" (default) or "json": one JSON object per log line.
GPUSCHED_HARNESS        "1" installs the simulator and the benchmarks (sim, bench): development,
                        the demo, benchmarks and tests; production leaves it unset.
DATABASE_URL            any dj-database-url URL; default is SQLite in var/ (WAL mode).
GPUSCHED_DB_POOL_SIZE   PostgreSQL only: the most connections one process keeps in a pool shared
                        by its threads (default 0: none; the web role's deployments set it).
GPUSCHED_DB_CONN_MAX_AGE
                        seconds a thread keeps its connection (default 0), where there is no pool.
GPUSCHED_DB_CONNECT_TIMEOUT
                        PostgreSQL only: seconds to open a connection, or to wait for one from
                        the pool, before the request fails with a 503 (default 5).
GPUSCHED_DB_STATEMENT_TIMEOUT_MS, GPUSCHED_DB_LOCK_TIMEOUT_MS
                        PostgreSQL only: the longest one statement runs, and waits for a lock,
                        before it is cancelled (default 0: no limit; the web role's deployments
                        set 10000 and 3000: docs/security.md).
GPUSCHED_WEB_REQUEST_THREADS
                        the most HTTP requests a web process runs at once (default 2; the rest
                        wait their turn): gpusched/request_handler.py.
GPUSCHED_MAX_PENDING_PODS_PER_TENANT, GPUSCHED_MAX_PENDING_PODS_PER_QUEUE (20000, 10000),
GPUSCHED_MAX_PENDING_WORKLOADS_PER_TENANT, GPUSCHED_MAX_PENDING_WORKLOADS_PER_QUEUE (2000, 1000),
GPUSCHED_MAX_PODS_PER_WORKLOAD (5000)
                        bounds on a tenant's pending work and on one submit (docs/security.md).
GPUSCHED_METRICS_TOKEN  when set, /metrics answers only `Authorization: Bearer <it>` (else 401);
                        unset, /metrics is open (development): docs/security.md.
GPUSCHED_METRICS_CACHE_S
                        the oldest /metrics a scrape may be served, in seconds (default 5): scrapes
                        within it share one read of the database.
REDIS_URL               Redis for the channel layer; default is the in-memory layer (one process).
HTTPS, cookies and static files: GPUSCHED_SECURE_*, GPUSCHED_HSTS_*, GPUSCHED_CSRF_TRUSTED_ORIGINS
and GPUSCHED_STATIC_ROOT, described in the "security" and "static files" sections below.
"""

import os
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int, minimum: int) -> int:
    value = os.environ.get(name, "").strip() or str(default)
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be a whole number >= {minimum}, not {value!r}")
    return number


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = _env_bool("GPUSCHED_DEBUG")

# With debug off and no key, SECRET_KEY stays empty and Django refuses anything that signs
# (sessions, admin login) with ImproperlyConfigured; `manage.py check --deploy` reports it too.
SECRET_KEY = os.environ.get("GPUSCHED_SECRET_KEY", "")
if not SECRET_KEY and DEBUG:
    SECRET_KEY = "django-insecure-gpusched-development-only"

ALLOWED_HOSTS = _env_list("GPUSCHED_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "scheduling",
    "telemetry",
    "dashboard",
    "kube",
    "api",
]

# The harness: the simulated clusters (sim) and the benchmarks and experiments (bench), installed
# only where GPUSCHED_HARNESS is set (the Makefile, `manage.py demo` and the processes it starts,
# the tests through gpusched/harness_settings.py, the benchmarks, compose's simulated roles).
# Production leaves them out, and no product app imports them (tests/test_architecture.py).
HARNESS = _env_bool("GPUSCHED_HARNESS")
if HARNESS:
    INSTALLED_APPS += ["sim", "bench"]
    # The pods the Kubernetes side makes of submitted workloads carry how the simulated kubelet
    # runs them (kube/materialize.py).
    KUBE_POD_ANNOTATIONS = "sim.runs.kube_annotations"

MIDDLEWARE = [
    "gpusched.web_metrics.request_metrics",  # first: it times everything after it
    "gpusched.error_pages.debug_not_found",  # debug mode: production's 404 answers, not Django's
    "gpusched.request_guards.refuse_nul",  # a %00 in the path or query: 400, before any view
    "gpusched.error_pages.DatabaseUnavailable",  # a query timed out or failed: 503, Retry-After
    "django.middleware.security.SecurityMiddleware",
    "gpusched.content_security_policy.content_security_policy",  # scripts from this site only
    # Production serves the collected static files itself; debug serves the apps' static folders
    # (gpusched/asgi.py).
    *([] if DEBUG else ["gpusched.staticfiles.StaticFilesMiddleware"]),
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gpusched.urls"
WSGI_APPLICATION = "gpusched.wsgi.application"
ASGI_APPLICATION = "gpusched.asgi.application"

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
            ],
        },
    },
]

# --- database ---------------------------------------------------------------------------------

# Every SQLite connection: WAL (readers never block the writer), IMMEDIATE write transactions
# (no lock-upgrade deadlocks between processes), and a 20 s busy timeout.
SQLITE_OPTIONS: dict[str, Any] = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
}

if os.environ.get("DATABASE_URL"):
    _conn_max_age = int(os.environ.get("GPUSCHED_DB_CONN_MAX_AGE", "0"))
    _default_db: dict[str, Any] = dict(
        dj_database_url.parse(
            os.environ["DATABASE_URL"], conn_max_age=_conn_max_age, conn_health_checks=True
        )
    )
    # The web role's pool (compose and deploy/web.yaml set it). Under ASGI every request runs its
    # database work on a thread of its own (asgiref), so without a pool each API request opened
    # and closed a PostgreSQL connection: 22 a second under bench_stack, each a backend process
    # forked and set up (docs/benchmarks.md). Only for processes whose threads give their
    # connection back (Django closes it at the end of every request): a thread that keeps one
    # holds a place in the pool for as long as it lives.
    _pool_size = _env_int("GPUSCHED_DB_POOL_SIZE", 0, minimum=0)
    _connect_timeout = _env_int("GPUSCHED_DB_CONNECT_TIMEOUT", 5, minimum=1)
    if _default_db["ENGINE"] == "django.db.backends.postgresql":
        # A server that does not answer costs a request this long, not the OS's minutes; a
        # statement or a lock wait past its limit is cancelled (QueryCanceled, LockNotAvailable:
        # OperationalErrors, which the API answers with a 503 and Retry-After), so a heavy query
        # or a lock held by a stopped process cannot hold a request thread indefinitely.
        _server_limits = " ".join(
            f"-c {name}={value}"
            for name, value in (
                ("statement_timeout", _env_int("GPUSCHED_DB_STATEMENT_TIMEOUT_MS", 0, minimum=0)),
                ("lock_timeout", _env_int("GPUSCHED_DB_LOCK_TIMEOUT_MS", 0, minimum=0)),
            )
            if value
        )
        _default_db["OPTIONS"] = {
            **_default_db.get("OPTIONS", {}),
            "connect_timeout": _connect_timeout,
            **({"options": _server_limits} if _server_limits else {}),
        }
    if _pool_size:
        if _default_db["ENGINE"] != "django.db.backends.postgresql":
            raise ImproperlyConfigured("GPUSCHED_DB_POOL_SIZE needs a PostgreSQL DATABASE_URL")
        if _conn_max_age:
            raise ImproperlyConfigured(
                "GPUSCHED_DB_POOL_SIZE and GPUSCHED_DB_CONN_MAX_AGE exclude each other: "
                "a pooled connection goes back to the pool at the end of each request"
            )
        _default_db["OPTIONS"] = {
            **_default_db.get("OPTIONS", {}),
            # Django checks each connection as it leaves the pool (conn_health_checks above): one
            # the server dropped is replaced there. A request waits for a free connection at
            # most the connect timeout (the pool's default is 30 s), then gets a 503.
            "pool": {
                "min_size": min(2, _pool_size),
                "max_size": _pool_size,
                "timeout": _connect_timeout,
            },
        }
else:
    VAR_DIR.mkdir(exist_ok=True)
    _default_db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "gpusched.sqlite3",
        # One file per test process, so concurrent test runs never share (or delete) a database.
        "TEST": {"NAME": str(VAR_DIR / f"test_gpusched_{os.getpid()}.sqlite3")},
    }
if _default_db["ENGINE"] == "django.db.backends.sqlite3":
    _default_db["OPTIONS"] = {**SQLITE_OPTIONS, **_default_db.get("OPTIONS", {})}

DATABASES = {"default": _default_db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channels ---------------------------------------------------------------------------------

if os.environ.get("REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 gives every read a 5 s timeout by default, and the layer's receive is a
            # BZPOPMIN blocking for 5 s: idle sockets were torn down every ~5 s
            # (django/channels_redis#422). No client-side read timeout for the layer.
            "CONFIG": {"hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": None}]},
        },
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- auth, i18n -------------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- static files -----------------------------------------------------------------------------

# `manage.py collectstatic` copies every app's static files into STATIC_ROOT (the image does it at
# build time), with a content hash in each name and compressed variants beside them; templates then
# link the hashed names, which StaticFilesMiddleware serves with a ten-year cache lifetime.
# GPUSCHED_STATIC_ROOT moves the folder (default var/static).
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("GPUSCHED_STATIC_ROOT") or VAR_DIR / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # In debug it links the plain names, so debug needs no collectstatic.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# --- security ---------------------------------------------------------------------------------

# With debug off the defaults are what `manage.py check --deploy` asks for. Where TLS ends in front
# of gpusched (an ingress, a reverse proxy) or not at all (plain HTTP on loopback), these variables
# adapt them; whatever is turned off is still reported by `check --deploy`:
#   GPUSCHED_SECURE_SSL_REDIRECT      redirect plain HTTP to HTTPS (default on unless debug);
#                                     /healthz, /readyz and /metrics also answer plain HTTP, for
#                                     probes and scrapers.
#   GPUSCHED_SECURE_PROXY_SSL_HEADER  trust `X-Forwarded-Proto: https` as "this request came
#                                     over HTTPS" (default off: only behind a proxy that always
#                                     sets it, else any client could claim HTTPS).
#   GPUSCHED_HSTS_SECONDS             Strict-Transport-Security max-age on HTTPS responses
#                                     (default a year unless debug; 0 sends none).
#   GPUSCHED_HSTS_INCLUDE_SUBDOMAINS, GPUSCHED_HSTS_PRELOAD: its two flags (default on).
#   GPUSCHED_CSRF_TRUSTED_ORIGINS     comma-separated origins besides the site's own that may
#                                     post forms, e.g. https://gpusched.example.com when TLS ends
#                                     at a proxy that sends no X-Forwarded-Proto.
SECURE_SSL_REDIRECT = _env_bool("GPUSCHED_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
if _env_bool("GPUSCHED_SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = int(os.environ.get("GPUSCHED_HSTS_SECONDS") or (0 if DEBUG else 31_536_000))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("GPUSCHED_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = _env_bool("GPUSCHED_HSTS_PRELOAD", default=True)
CSRF_TRUSTED_ORIGINS = _env_list("GPUSCHED_CSRF_TRUSTED_ORIGINS", "")

# Session and CSRF cookies travel over HTTPS only (browsers also accept them on http://localhost),
# and scripts cannot read the session cookie.
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True

# No page is framed, no response is sniffed into another type, no full URL leaks to other sites.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# The dashboard is for platform admins: pages and websockets need a signed-in staff user.
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:cluster"
LOGOUT_REDIRECT_URL = "dashboard:login"

# --- request bodies ---------------------------------------------------------------------------

# The largest body the web process reads (API requests, forms, the optional extender routes):
# GPUSCHED_MAX_BODY_BYTES, default 1 MiB, far above any real request (docs/security.md). A larger
# one is refused with 413 before it is decoded; JSON is decoded with bounded nesting
# (common/jsonbody.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("GPUSCHED_MAX_BODY_BYTES") or 1024 * 1024)

# --- requests in flight ----------------------------------------------------------------------

# How many HTTP requests one web process runs at once, each on a thread of its own
# (gpusched/request_handler.py): more only queue for the GIL ahead of the event loop and the
# dashboard's deltas. Two keep the process busy while one of them waits on the database.
WEB_REQUEST_THREADS = _env_int("GPUSCHED_WEB_REQUEST_THREADS", 2, minimum=1)

# --- Content-Security-Policy --------------------------------------------------------------------

# Sent with every response (gpusched/content_security_policy.py says what each directive is for).
CONTENT_SECURITY_POLICY = os.environ.get("GPUSCHED_CONTENT_SECURITY_POLICY", "").strip() or (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)

# --- pending work per tenant ------------------------------------------------------------------

# What one tenant may leave waiting, like Kubernetes' ResourceQuota `count/pods` (a submit past
# them is refused 403 "exceeded quota", as the ResourceQuota admission plugin refuses a pod):
# pods not yet on a node and workloads not yet admitted, per tenant and per LocalQueue, so that
# what the scheduler holds grows with what it can admit, not with what is submitted. Generous
# defaults: the demo and the tests stay far below them (docs/security.md).
MAX_PENDING_PODS_PER_TENANT = _env_int("GPUSCHED_MAX_PENDING_PODS_PER_TENANT", 20000, minimum=1)
MAX_PENDING_PODS_PER_QUEUE = _env_int("GPUSCHED_MAX_PENDING_PODS_PER_QUEUE", 10000, minimum=1)
MAX_PENDING_WORKLOADS_PER_TENANT = _env_int(
    "GPUSCHED_MAX_PENDING_WORKLOADS_PER_TENANT", 2000, minimum=1
)
MAX_PENDING_WORKLOADS_PER_QUEUE = _env_int(
    "GPUSCHED_MAX_PENDING_WORKLOADS_PER_QUEUE", 1000, minimum=1
)
# The most pods one submit may ask for (all its pod sets together): a 422 past it.
MAX_PODS_PER_WORKLOAD = _env_int("GPUSCHED_MAX_PODS_PER_WORKLOAD", 5000, minimum=1)

# --- Events posted to Kubernetes (runkube, and the extender when it binds) -------------------

# Events (Scheduled, FailedScheduling, Preempted, node quarantines) are best effort: beyond this
# many a second, after a burst of this many, they are dropped rather than waited for, as
# kube-scheduler's client rate limit (qps 50, burst 100 by default) and its broadcaster drop them
# (kube.api.EventBudget; counted on each process's /metrics). Bindings are never limited.
KUBE_EVENTS_PER_S = _env_int("GPUSCHED_KUBE_EVENTS_PER_S", 50, minimum=1)
KUBE_EVENT_BURST = _env_int("GPUSCHED_KUBE_EVENT_BURST", 100, minimum=1)

# --- /metrics --------------------------------------------------------------------------------

# /metrics names tenants (gpusched_tenant_*): with a token set, only a scraper presenting it reads
# them. Unset (development), anyone who reaches the port may (docs/security.md).
METRICS_TOKEN = os.environ.get("GPUSCHED_METRICS_TOKEN", "").strip()
# A scrape reads the whole cluster from the database; scrapes within this many seconds of the last
# read are served what it read, so replicas' scrapers and anyone polling cost one read per window.
METRICS_CACHE_S = float(os.environ.get("GPUSCHED_METRICS_CACHE_S", "").strip() or 5)

# --- the simulator -----------------------------------------------------------------------------

# The demo's simulated cluster runs workloads this many times faster than the wall clock
# (`manage.py demo --speed` sets GPUSCHED_SIM_SPEED for the processes it starts); the dashboard
# says so. None: a real cluster.
SIM_SPEED = (
    float(os.environ["GPUSCHED_SIM_SPEED"]) if os.environ.get("GPUSCHED_SIM_SPEED") else None
)

# --- REST API ---------------------------------------------------------------------------------

# Tenants send `Authorization: Bearer <token>`; admins (staff users) use a session or a token of
# their own. Every error has one shape: {"message": ..., "extra": {...}} (api/exceptions.py).
# Throttle rates ("N/second|minute|hour|day") per tenant or admin token (`api`), for workload
# submits (`submit`) and for unauthenticated clients (`anon`):
#   GPUSCHED_API_RATE (1200/min), GPUSCHED_API_SUBMIT_RATE (300/min),
#   GPUSCHED_API_ANON_RATE (60/min)
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "api.schema.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.PrincipalRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "api": os.environ.get("GPUSCHED_API_RATE", "1200/min"),
        "submit": os.environ.get("GPUSCHED_API_SUBMIT_RATE", "300/min"),
        "anon": os.environ.get("GPUSCHED_API_ANON_RATE", "60/min"),
    },
    "DEFAULT_PARSER_CLASSES": ["api.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "api.exceptions.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "gpusched API",
    "OAS_VERSION": "3.1.0",
    "DESCRIPTION": "Topology-aware GPU scheduler: tenants, queues, workloads, placements.",
    "VERSION": "0.1.0",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two choice sets share the field name "kind"; naming them keeps the schema's enums stable.
    "ENUM_NAME_OVERRIDES": {
        "QueueSourceKindEnum": ["database", "cluster", "kueue"],
        "PriorityClassKindEnum": ["PriorityClass", "WorkloadPriorityClass"],
    },
}

# API throttling counts in the default cache: Redis when REDIS_URL is set (shared by every web
# replica), else this process's memory.
if os.environ.get("REDIS_URL"):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["REDIS_URL"],
            # An unreachable Redis costs a request one second, not the OS connect timeout (the
            # throttle then lets it through: api/throttling.py).
            "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
        }
    }

# --- kube-scheduler extender -------------------------------------------------------------------

# `runextender` serves it on its own port over TLS (kube/extender_auth.py, docs/security.md):
#   GPUSCHED_EXTENDER_TLS_CERT, GPUSCHED_EXTENDER_TLS_KEY  the server's certificate and key (PEM)
#   GPUSCHED_EXTENDER_CLIENT_CA       admit client certificates this CA signed (kube-scheduler's)
#   GPUSCHED_EXTENDER_CLIENT_NAMES    ... only with one of these common names / DNS SANs
#   GPUSCHED_EXTENDER_TOKEN_FILE      admit `Authorization: Bearer` with a token of this file
# GPUSCHED_WEB_EXTENDER=1 also serves /extender/* on the web port (off by default: a 404), for
# bearer-token callers only.
WEB_EXTENDER = _env_bool("GPUSCHED_WEB_EXTENDER")
EXTENDER_TLS_CERT = os.environ.get("GPUSCHED_EXTENDER_TLS_CERT", "")
EXTENDER_TLS_KEY = os.environ.get("GPUSCHED_EXTENDER_TLS_KEY", "")
EXTENDER_CLIENT_CA = os.environ.get("GPUSCHED_EXTENDER_CLIENT_CA", "")
EXTENDER_CLIENT_NAMES = _env_list("GPUSCHED_EXTENDER_CLIENT_NAMES", "")
EXTENDER_TOKEN_FILE = os.environ.get("GPUSCHED_EXTENDER_TOKEN_FILE", "")

# --- logging ----------------------------------------------------------------------------------

# Plain text for people at a terminal; JSON lines (gpusched/log_formats.py) for log shippers.
LOG_FORMAT = os.environ.get("GPUSCHED_LOG_FORMAT", "").strip().lower() or "plain"
if LOG_FORMAT not in {"plain", "json"}:
    raise ValueError(f"GPUSCHED_LOG_FORMAT={LOG_FORMAT!r}: expected plain or json")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"},
        "json": {"()": "gpusched.log_formats.JsonFormatter"},
    },
    "handlers": {
        # stderr: stdout is the commands' own output (`--json` documents, reports).
        "stderr": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "formatter": LOG_FORMAT,
        },
    },
    "root": {"handlers": ["stderr"], "level": os.environ.get("GPUSCHED_LOG_LEVEL", "INFO")},
}

# --- telemetry ---------------------------------------------------------------------------------

# What the ingester hands the pods dcgm-exporter shows on each GPU, every cycle
# (telemetry/holders.py): the scheduler's check, which compares them with the GPUs it recorded
# and corrects the record.
TELEMETRY_HOLDERS_CHECK = "scheduling.services.assignments_reconcile"
# The nodes telemetry may be placed on (telemetry/placement.py): the scheduler's registered nodes.
TELEMETRY_CLUSTER_NODES = "scheduling.selectors.nodes.node_names"

# --- admin actions on the Kubernetes cluster's nodes ------------------------------------------

# A cordon, uncordon or drain of a Kubernetes node is carried out by the scheduler's next cycle
# (scheduling.worker.node_actions); the REST API and the dashboard wait this long for the
# cluster's answer before answering 202 with where to read it.
NODE_ACTION_WAIT_S = float(os.environ.get("GPUSCHED_NODE_ACTION_WAIT_S") or 10)

# --- the scheduling cycle ---------------------------------------------------------------------

# A leader's cycle yields once this many seconds have passed (scheduling.worker.cycle): placements
# not yet committed, and a batch not yet taken after admission or evictions did work, are left
# for the next cycle, which starts at once (counted: gpusched_scheduling_deferred_pods_total).
# A third of the scheduler's lease (15 s), which each cycle renews, and well inside its liveness
# budget (30 s).
SCHEDULER_CYCLE_DEADLINE_S = float(os.environ.get("GPUSCHED_CYCLE_DEADLINE_S") or 5)

# --- admission: the starvation bound (gpusched's, not Kueue's) --------------------------------

# A workload waiting longer than this that finds no quota stops its cohort's admissions for the
# cycle, and a starving gang's reservation ranks ahead of fair-share order (docs/overview.md). The
# default is the reservation horizon, 6 h (scheduling.core.queueing.backfill); 0 turns it off, as
# in Kueue.
SCHEDULER_STARVING_AFTER_S = float(os.environ.get("GPUSCHED_STARVING_AFTER_S") or 6 * 3600)

# --- admission: Kueue's waitForPodsReady ------------------------------------------------------

# An admitted workload whose pods are not all placed this many seconds after admission is evicted
# back to its queue (quota released, Evicted reason PodsReadyTimeout) and requeued after a backoff
# of base * 2^(n-1) seconds for its n-th such eviction, at most max (Kueue's requeuingStrategy
# defaults). 0 turns the timeout off.
PODS_READY_TIMEOUT_S = float(os.environ.get("GPUSCHED_PODS_READY_TIMEOUT_S") or 300)
PODS_READY_BACKOFF_BASE_S = float(os.environ.get("GPUSCHED_PODS_READY_BACKOFF_BASE_S") or 60)
PODS_READY_BACKOFF_MAX_S = float(os.environ.get("GPUSCHED_PODS_READY_BACKOFF_MAX_S") or 3600)
