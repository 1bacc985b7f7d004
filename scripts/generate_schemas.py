"""Write the JSON Schemas shipped in dynamic_kafka/schemas/ and the configuration reference committed in
docs/reference/ from the config models (`make schemas`).

`--check` writes nothing and exits 1 when a file differs from what the models generate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynamic_kafka.schemas import generated, render
from dynamic_kafka.schemas.reference import render_reference

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "dynamic_kafka" / "schemas"
REFERENCE = ROOT / "docs" / "reference" / "configuration.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report files that differ from the models")
    args = parser.parse_args()
    stale = []
    files = {TARGET / name: render(schema) for name, schema in generated().items()}
    for path, text in {**files, REFERENCE: render_reference()}.items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if args.check and stale:
        print("stale: " + ", ".join(str(p) for p in stale) + "; run `make schemas`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
