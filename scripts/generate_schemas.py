"""Write the JSON Schemas shipped in dynamic_kafka/schemas/ from the config models (`make schemas`).

`--check` writes nothing and exits 1 when a shipped file differs from what the models generate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynamic_kafka.schemas import generated, render

TARGET = Path(__file__).resolve().parent.parent / "dynamic_kafka" / "schemas"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report files that differ from the models")
    args = parser.parse_args()
    stale = []
    for name, schema in generated().items():
        path = TARGET / name
        text = render(schema)
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
