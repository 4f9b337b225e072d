# gpusched: one image for every role of the product (web, scheduler, ingester, Kubernetes side);
# the command picks it. The default target is the product alone; `harness` adds the simulated
# clusters and the benchmarks (sim/, bench/) for docker-compose.yml's simulated roles.

# Front-end packages come from the npm registry, pinned by the lock file.
FROM node:20-bookworm-slim AS frontend
WORKDIR /src/dashboard/frontend
COPY dashboard/frontend/package.json dashboard/frontend/package-lock.json dashboard/frontend/copy-vendor.mjs ./
RUN npm ci --no-audit --no-fund --loglevel=error && npm run --silent build

FROM python:3.11-slim-bookworm AS product
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /app
# The product's packages only: no harness, tests, docs or deployment files.
COPY pyproject.toml README.md manage.py ./
COPY gpusched gpusched
COPY common common
COPY scheduling scheduling
COPY telemetry telemetry
COPY dashboard dashboard
COPY kube kube
COPY api api
COPY templates templates
COPY --from=frontend /src/dashboard/static/dashboard/vendor dashboard/static/dashboard/vendor
# The static files (the front-end packages above included) collected into var/static with hashed
# names and compressed variants; the web process serves them from there (gpusched/staticfiles.py).
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /app gpusched \
    && mkdir -p var && python manage.py collectstatic --noinput -v 0 \
    && chown -R gpusched var
USER gpusched
EXPOSE 8000 9400
CMD ["python", "manage.py", "runweb", "--host", "0.0.0.0", "--port", "8000"]

# The simulated clusters and the benchmarks beside the product, installed by the switch.
FROM product AS harness
COPY sim sim
COPY bench bench
COPY data data
ENV GPUSCHED_HARNESS=1

# The default: the product alone.
FROM product AS production
