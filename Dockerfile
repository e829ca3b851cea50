# CPU stages (simplify, reconstruct, fallback; label with the CPU labellers). No vLLM.
# Installed through the lock (requirements/lock-dev.txt as constraints; uv applies
# requirements/overrides.txt), so the image has the versions CI tested.
FROM python:3.11-slim
WORKDIR /app
COPY requirements requirements
RUN pip install --no-cache-dir -r requirements/uv.txt
COPY pyproject.toml README.md ./
COPY topics topics
COPY processors processors
COPY gpu_worker gpu_worker
COPY streams streams
COPY samples samples
RUN uv pip install --system --no-cache -c requirements/lock-dev.txt \
      --override requirements/overrides.txt .
USER 65534
ENTRYPOINT ["dripstream"]
CMD ["worker"]
