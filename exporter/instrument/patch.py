"""The wrappers of ``InferenceSession.run`` and ``run_with_iobinding``.

Per call the wrapper reads the wall clock twice (``time.time_ns()``), calls
the original, and appends one :data:`~.recorder.Row` tuple to the
recorder's queue. The original's result and exceptions pass through
unchanged; a call that raises is not recorded. Anything of ours that fails
is swallowed and counted (``reason="error"``). Nothing here imports
onnxruntime, Arrow or NATS.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from exporter.instrument.recorder import Recorder, SessionMeta

META_ATTR = "_aaco_meta"
"""Attribute caching a session's :class:`SessionMeta` on the session object."""
log = logging.getLogger("aaco.instrument")
WRAPPED_ATTR = "__aaco_wrapped__"
"""Attribute of a wrapper naming the original function (idempotency, restore)."""


def model_name(path: Path) -> str:
    """The model file's stem, or its folder's name when the stem is generic
    (``model.onnx``): the rule of ``collectors.ort.graph.default_model_name``,
    repeated here because that module imports onnx.

    >>> model_name(Path("/m/standard_v3_3/model.onnx")), model_name(Path("/m/resnet50.onnx"))
    ('standard_v3_3', 'resnet50')
    """
    return path.parent.name if path.stem.lower() in {"model", "model_fp32", "onnx"} else path.stem


def session_meta(rec: Recorder, sess: Any) -> SessionMeta:
    """``sess``'s metadata: model name (``AACO_MODEL_NAME``, else :func:`model_name`
    of the model path; ``unknown`` for a model given as bytes), path and first provider."""
    path = getattr(sess, "_model_path", None)
    path = os.fspath(path) if path else None
    name = os.environ.get("AACO_MODEL_NAME") or (model_name(Path(path)) if path else "unknown")
    try:
        providers = sess.get_providers()
        provider = str(providers[0]) if providers else None
    except Exception:
        provider = None
    meta = rec.meta(name, path, provider)
    with contextlib.suppress(Exception):  # else it is recomputed per call
        setattr(sess, META_ATTR, meta)
    return meta


def _batch_size(feed: object) -> int | None:
    """First dimension of the first input of a feed dict, when it has a shape."""
    if isinstance(feed, Mapping):
        for v in feed.values():
            shape = getattr(v, "shape", None)
            return int(shape[0]) if isinstance(shape, tuple) and shape else None
    return None


def wrap(orig: Callable[..., Any], rec: Recorder, *, iobinding: bool) -> Callable[..., Any]:
    """A wrapper of ``orig`` (``run`` or, with ``iobinding``, ``run_with_iobinding``)
    recording each successful call into ``rec``."""
    time_ns = time.time_ns
    native_id = threading.get_native_id
    modules = sys.modules

    def record(sess: Any, t0: int, t1: int, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> None:
        meta = sess.__dict__.get(META_ATTR) or session_meta(rec, sess)
        it = next(meta.counter)
        batch = None
        if not iobinding:
            batch = _batch_size(args[1] if len(args) > 1 else kwargs.get("input_feed"))
        trace_id = span_id = None
        otel = modules.get("opentelemetry.trace")
        if otel is not None:
            ctx = otel.get_current_span().get_span_context()
            if ctx.is_valid:
                trace_id, span_id = ctx.trace_id, ctx.span_id
        q = rec.queue
        if len(q) >= rec.cap:
            rec.drop("queue_full")
            return
        q.append((t0, t1, native_id(), meta, it, batch, trace_id, span_id))

    @functools.wraps(orig)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time_ns()
        result = orig(self, *args, **kwargs)
        t1 = time_ns()
        try:
            record(self, t0, t1, args, kwargs)
        except Exception:
            log.debug("recording a call failed", exc_info=True)
            rec.drop("error")
        return result

    setattr(wrapper, WRAPPED_ATTR, orig)
    return wrapper


METHODS = (("run", False), ("run_with_iobinding", True))


def patch_class(cls: type, rec: Recorder) -> bool:
    """Wrap ``cls.run`` and ``cls.run_with_iobinding``; False if already wrapped."""
    if hasattr(getattr(cls, "run", None), WRAPPED_ATTR):
        return False
    for name, iob in METHODS:
        orig = getattr(cls, name, None)
        if orig is not None:
            setattr(cls, name, wrap(orig, rec, iobinding=iob))
    return True


def unpatch_class(cls: type) -> bool:
    """Restore what :func:`patch_class` replaced; False if nothing was wrapped."""
    done = False
    for name, _ in METHODS:
        cur = cls.__dict__.get(name)
        orig = getattr(cur, WRAPPED_ATTR, None)
        if orig is None:
            continue
        base = next((c.__dict__[name] for c in cls.__mro__[1:] if name in c.__dict__), None)
        if base is orig:
            delattr(cls, name)  # it was inherited (Session.run): un-shadow it
        else:
            setattr(cls, name, orig)
        done = True
    return done
