"""Bootstrap of ``aaco-exporter instrument``: first on ``PYTHONPATH``, imported at startup.

With ``AACO_INSTRUMENT=1`` it arranges for ONNX Runtime to be instrumented
when the program imports it (:mod:`exporter.instrument.hook`); then it runs
the ``sitecustomize`` this one shadows, if any. It never raises.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _aaco_bootstrap() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("AACO_INSTRUMENT") == "1":
        try:
            try:
                from exporter.instrument.hook import instrument_when_imported
            except ImportError:  # the project is not on this interpreter's path: add it last
                sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(here))))
                from exporter.instrument.hook import instrument_when_imported
            instrument_when_imported()
        except Exception as e:
            sys.stderr.write(f"aaco-exporter instrument: not instrumented: "
                             f"{type(e).__name__}: {e}\n")
    # Chain to the sitecustomize we shadow (the next one on sys.path).
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _aaco_bootstrap()
except Exception as _e:
    sys.stderr.write(f"aaco-exporter instrument: sitecustomize: {type(_e).__name__}: {_e}\n")
