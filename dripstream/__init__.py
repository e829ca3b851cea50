"""dripstream: web pages in, clean Markdown records out (the Dripper method on Kafka).

The installed distribution has this one import name. Its parts are the repository's
top-level folders, mapped in by ``pyproject.toml``: ``dripstream.topics`` (the contract),
``dripstream.processors`` (pure CPU work), ``dripstream.gpu_worker`` (model inference) and
``dripstream.streams`` (wiring and the command line). Dependencies point that way only.
"""
