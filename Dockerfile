# One image for every service of docker-compose.yml: web (daphne), worker (celery), ray-head, ray-worker.
#   docker build -t dapo-platform .                         CPU image: the pinned lock, torch 2.13.0+cpu
#   docker build -t dapo-platform:gpu --build-arg GPU=1 .   GPU image: requirements-gpu.lock (vLLM 0.33, the
#                                                           CUDA 13 torch 2.14 it needs, the same runtime)
FROM python:3.11-slim

ARG GPU=0
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONPATH=/app:/app/platform \
    DJANGO_SETTINGS_MODULE=config.settings \
    DAPO_VAR_DIR=/var/lib/dapo \
    RAY_USAGE_STATS_ENABLED=0

WORKDIR /app

# Dependencies first, so a code change does not reinstall them.
COPY requirements.lock requirements-gpu.lock ./
RUN set -eux; \
    if [ "$GPU" = "1" ]; then \
        pip install -r requirements-gpu.lock; \
    else \
        pip install --extra-index-url "$TORCH_CPU_INDEX" -r requirements.lock; \
    fi

COPY . .
# PYTHONDONTWRITEBYTECODE: nothing compiles at run time, so the sources are compiled once here (pip did the
# dependencies); else every process, each Celery worker and Ray actor, would compile them again at start.
RUN python -m compileall -q /app
# Static files are part of the image (whitenoise serves them). Collecting needs a secret key: a throwaway
# one, else the settings would generate one into /var/lib/dapo and bake it into the image.
RUN DJANGO_SECRET_KEY=collectstatic-at-build-time-only-never-a-site-key \
    python manage.py collectstatic --noinput \
    && useradd --create-home --uid 1000 dapo \
    && mkdir -p /var/lib/dapo \
    && chown -R dapo /var/lib/dapo
USER dapo

EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "config.asgi:application"]
