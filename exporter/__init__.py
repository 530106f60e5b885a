"""aaco-exporter: CLI, daemon and sinks."""

from exporter.natsimport import import_nats as _import_nats

_import_nats()  # before any module here imports nats: see exporter/natsimport.py
