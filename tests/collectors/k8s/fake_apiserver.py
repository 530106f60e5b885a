"""A fake Kubernetes API server: ``GET /api/v1/pods`` answers a PodList (the
real wire JSON the ``kubernetes`` client decodes) or a chosen error status.

    with FakeApiServer(pods) as api:
        api.kubeconfig(path)   # a kubeconfig pointing at it with token "t0k"
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def pod(ns: str, name: str, uid: str, node: str,
        containers: dict[str, str]) -> dict[str, Any]:
    """One v1 Pod; ``containers``: container name -> ``<runtime>://<id>``."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": c} for c in containers]},
            "status": {"containerStatuses": [
                {"name": c, "containerID": cid, "image": "img", "imageID": "",
                 "ready": True, "restartCount": 0} for c, cid in containers.items()]}}


class FakeApiServer:
    """Serves ``pods`` (filtered by the ``spec.nodeName`` field selector)."""

    def __init__(self, pods: list[dict[str, Any]], status: int = 200) -> None:
        self.pods, self.status = pods, status
        self.requests: list[tuple[str, dict[str, list[str]], str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlparse(self.path)
                q = urllib.parse.parse_qs(url.query)
                owner.requests.append((url.path, q, self.headers.get("Authorization", "")))
                if owner.status != 200 or url.path != "/api/v1/pods":
                    code = owner.status if owner.status != 200 else 404
                    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                       "code": code, "reason": "Forbidden"}).encode()
                else:
                    node = next((s.split("=", 1)[1] for s in q.get("fieldSelector", [])
                                 if s.startswith("spec.nodeName=")), None)
                    items = [p for p in owner.pods if node in (None, p["spec"]["nodeName"])]
                    code, body = 200, json.dumps({"apiVersion": "v1", "kind": "PodList",
                                                  "metadata": {}, "items": items}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def kubeconfig(self, path: Path) -> Path:
        port = self.server.server_address[1]
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t0k"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
        return path

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
