# reactq: one image for every role (worker, gateway, flower, migrate).
# Build stage: wheels of reactq and its extras, with the compilers kept out of the result.
FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md LICENSE ./
COPY shared ./shared
COPY worker ./worker
COPY producer ./producer
COPY reactq ./reactq
RUN pip wheel --wheel-dir /wheels '.[postgres,gateway,flower,metrics,otel,images]'

# Runtime stage: the wheels only, run as an unprivileged user. No secret is baked
# in: keys and passwords come from the environment at run time.
FROM python:3.11-slim AS runtime
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 REACTQ_LOG_FORMAT=json
# /var/lib/reactq/workspaces: the file tools' workspaces (REACTQ_WORKSPACE_ROOT in
# docker-compose.yml); a named volume mounted there starts with this owner.
# bubblewrap: run_code's sandbox (reactq.bundles.sandbox). It needs user namespaces, which
# Docker's default seccomp profile refuses: without them the tools are left out (logged).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system reactq && useradd --system --gid reactq --home-dir /app reactq \
    && mkdir -p /app /var/lib/reactq/workspaces \
    && chown reactq:reactq /app /var/lib/reactq/workspaces
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels 'reactq[postgres,gateway,flower,metrics,otel,images]' \
    && rm -rf /wheels
WORKDIR /app
USER reactq
# The demo agent ships in the package (reactq.demo.weather:agent); mount your own
# agents and name them with REACTQ_AGENTS.
EXPOSE 8000 5555 9000
CMD ["reactq", "worker"]
