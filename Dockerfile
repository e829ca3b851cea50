# CPU stages (simplify, reconstruct, fallback; label with the CPU labellers). No vLLM.
# Installed through the lock (requirements/lock-dev.txt as constraints; uv applies
# requirements/overrides.txt), so the image has the versions CI tested. A build stage with
# a C compiler makes the wheel with the hot CPU modules compiled (setup.py: mypyc); the
# image itself holds no compiler. Bytecode is compiled at install: the image runs as a
# user that cannot write __pycache__, and without it every process (each worker and its
# sandbox's zygote) compiles the stack's modules again at start, 0.5-1 s of CPU.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements requirements
RUN pip install --no-cache-dir -r requirements/uv.txt
COPY pyproject.toml setup.py README.md ./
COPY topics topics
COPY processors processors
COPY gpu_worker gpu_worker
COPY streams streams
RUN uv build --wheel -o /wheels

FROM python:3.11-slim
WORKDIR /app
COPY requirements requirements
RUN pip install --no-cache-dir -r requirements/uv.txt
COPY --from=build /wheels /wheels
COPY samples samples
RUN uv pip install --system --no-cache --compile-bytecode -c requirements/lock-dev.txt \
      --override requirements/overrides.txt /wheels/*.whl \
    && python -c 'from dripstream.processors.native import compiled_modules as c; assert all(c().values()), c()'
USER 65534
ENTRYPOINT ["dripstream"]
CMD ["worker"]
