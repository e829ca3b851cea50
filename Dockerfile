# CPU stages (simplify, reconstruct, fallback; label with the heuristic labeller).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY topics topics
COPY processors processors
COPY gpu_worker gpu_worker
COPY streams streams
COPY samples samples
RUN pip install --no-cache-dir .
USER 65534
ENTRYPOINT ["dripstream"]
CMD ["worker"]
