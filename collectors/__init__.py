"""Collector plugins: one sub-package per source. See :mod:`collectors.base`."""

from collectors.base import Collector, CollectorContext, Emit, available, create, register

__all__ = ["Collector", "CollectorContext", "Emit", "available", "create", "register"]
