"""Regenerate the kubelet pod-resources v1 Python bindings with grpcio-tools.

    python scripts/gen_podresources.py [OUT_ROOT]

Compiles ``collectors/k8s/podresources_v1/api.proto`` (vendored from
kubernetes, see ``collectors/k8s/PROVENANCE.md``) into ``api_pb2.py``,
``api_pb2.pyi`` and ``api_pb2_grpc.py`` next to it (or under ``OUT_ROOT``,
same relative path: the test ``tests/collectors/k8s/test_k8s_podresources_proto.py``
does that and compares with the committed files). Needs the ``dev`` extra
(``grpcio-tools``). Exit status: protoc's.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO = "collectors/k8s/podresources_v1/api.proto"


def generate(out_root: Path) -> int:
    """Run protoc from grpcio-tools; files land under ``out_root``/<proto dir>."""
    from grpc_tools import protoc  # dev extra only

    out_root.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out_root}",
            f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", str(ROOT / PROTO)]
    return int(protoc.main(args))


if __name__ == "__main__":
    sys.exit(generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
