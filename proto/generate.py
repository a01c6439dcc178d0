# SPDX-License-Identifier: Apache-2.0
"""Regenerate ipamd's gRPC stubs from proto/ into the import tree (ipamd/api/v1).

Usage: ``python proto/generate.py`` writes the stubs; ``--check`` regenerates
into a temporary directory and fails (exit 1) when the committed files differ,
so CI catches a .proto edited without regenerating. Comparing files rather
than ``git diff`` keeps the check independent of unrelated work-tree edits.

Imports grpc_tools (the dev extra), never needed at runtime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
REPO_ROOT = PROTO_ROOT.parent
PROTOS = ["ipamd/api/v1/ipam.proto"]
OUTPUTS = ["ipam_pb2.py", "ipam_pb2.pyi", "ipam_pb2_grpc.py"]
OUT_PACKAGE = Path("ipamd/api/v1")


def generate(out_root: Path) -> None:
    """Run protoc (bundled with grpc_tools) writing below ``out_root``."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *(str(PROTO_ROOT / p) for p in PROTOS),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


def stale_files() -> list[str]:
    """Names of committed stubs that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = []
        for name in OUTPUTS:
            fresh = (Path(tmp) / OUT_PACKAGE / name).read_bytes()
            committed = REPO_ROOT / OUT_PACKAGE / name
            if not committed.exists() or committed.read_bytes() != fresh:
                stale.append(str(OUT_PACKAGE / name))
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if the committed stubs are stale"
    )
    opts = parser.parse_args(argv)
    if opts.check:
        stale = stale_files()
        if stale:
            print(
                "stale generated code (run python proto/generate.py): "
                + ", ".join(stale),
                file=sys.stderr,
            )
            return 1
        print("generated code is up to date", file=sys.stderr)
        return 0
    generate(REPO_ROOT)
    print(f"wrote {', '.join(str(OUT_PACKAGE / n) for n in OUTPUTS)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
