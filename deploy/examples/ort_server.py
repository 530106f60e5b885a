"""A sample ONNX Runtime inference server, for the compose stack and docs.

It is an ordinary server that knows nothing of aaco-exporter: run it under
``aaco-exporter instrument -- python deploy/examples/ort_server.py`` and its
``InferenceSession.run`` calls become iteration spans on the node's bus.

``POST /infer`` (or ``GET /infer``) runs the model once on a zero input and
answers ``{"ms": latency}``. ``--self-load RPS`` sends itself that many
requests per second (0: none), so the stack shows traffic without a client.
The default model is the one the ``magika`` PyPI package ships.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import onnxruntime as ort


def default_model() -> str:
    spec = importlib.util.find_spec("magika")
    if spec is None or spec.origin is None:
        raise SystemExit("no --model and the magika package is not installed")
    found = sorted(Path(spec.origin).parent.glob("models/*/model.onnx"))
    if not found:
        raise SystemExit("no model.onnx inside the magika package")
    return str(found[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="ONNX model (default: magika's)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--self-load", type=float, default=20.0, help="requests/s to itself")
    a = ap.parse_args()
    sess = ort.InferenceSession(a.model or default_model(), providers=ort.get_available_providers())
    inp = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    feed = {inp.name: np.zeros(shape, np.int32 if "int" in inp.type else np.float32)}
    lock = threading.Lock()  # one session, one run at a time (like a batch-1 server)

    class Handler(BaseHTTPRequestHandler):
        def _infer(self) -> None:
            t0 = time.perf_counter()
            with lock:
                sess.run(None, feed)
            body = json.dumps({"ms": (time.perf_counter() - t0) * 1e3}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _infer

        def log_message(self, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("0.0.0.0", a.port), Handler)
    if a.self_load > 0:
        def load() -> None:
            url = f"http://127.0.0.1:{a.port}/infer"
            while True:
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(url, timeout=5).read()
                time.sleep(1.0 / a.self_load)

        threading.Thread(target=load, daemon=True).start()
    print(f"serving {sess.get_modelmeta().graph_name or 'model'} on :{a.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
