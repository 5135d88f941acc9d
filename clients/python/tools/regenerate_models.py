"""Writes src/simtree_client/models.py from the OpenAPI document a simtree binary serves, exactly
as tests/test_models.py generates it (so that test passes after a wire change).

    SIMTREE_BIN=target/debug/simtree python clients/python/tools/regenerate_models.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(HERE / "src"), str(HERE / "tests")]

from test_models import COMMITTED, generate  # noqa: E402


def main() -> None:
    binary = os.environ.get("SIMTREE_BIN", str(HERE.parents[1] / "target" / "debug" / "simtree"))
    server = subprocess.Popen(
        [binary, "serve", "--ephemeral", "--addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        found = re.search(r"http://[0-9.:]+", server.stdout.readline())
        if not found:
            sys.exit("the server did not say where it listens")
        document = json.load(urllib.request.urlopen(found.group(0) + "/openapi.json"))
    finally:
        server.terminate()
    with tempfile.TemporaryDirectory() as folder:
        COMMITTED.write_text(generate(document, Path(folder)))
    print(f"wrote {COMMITTED}")


if __name__ == "__main__":
    main()
