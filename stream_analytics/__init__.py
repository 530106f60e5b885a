"""Online consumers of the bus: KAR, LTS, SII, drift and bottleneck labels."""

from exporter.natsimport import import_nats as _import_nats

_import_nats()  # nats-py without its eager aiohttp import: see exporter/natsimport.py
