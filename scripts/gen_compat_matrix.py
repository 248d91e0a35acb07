"""Regenerate the matrix in docs/compatibility.md from a real run of compat-tests/.

    python3 scripts/gen_compat_matrix.py                          # against a fresh kbroker
    python3 scripts/gen_compat_matrix.py -n 2                     # arguments go on to pytest
    python3 scripts/gen_compat_matrix.py --bootstrap host:port    # any running broker
    python3 scripts/gen_compat_matrix.py --target kafka-container # Apache Kafka in Docker

Only the part between the matrix markers is replaced; the hand-written text around it stays.
Failing tests still update the page (their cells show ❌) and make the script exit non-zero.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "compatibility.md"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"


def splice(document: str, matrix: str) -> str:
    """`document` with everything between BEGIN and END replaced by `matrix`."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{BEGIN} ... {END} not found (in that order) in the document")
    return f"{document[:start + len(BEGIN)]}\n{matrix.strip()}\n{document[end:]}"


def main(pytest_args: list[str]) -> int:
    generated = DOC.with_name(DOC.name + ".tmp")
    command = [sys.executable, "-m", "pytest", "compat-tests", "-p", "no:cacheprovider", "-q",
               f"--matrix={generated}", *pytest_args]
    try:
        status = subprocess.run(command, cwd=ROOT, check=False).returncode
        if status not in (0, 1) or not generated.is_file():  # interrupted, usage or internal error
            print(f"pytest exited {status} without a complete run; {DOC} left as it was", file=sys.stderr)
            return status or 1
        DOC.write_text(splice(DOC.read_text(encoding="utf-8"), generated.read_text(encoding="utf-8")),
                       encoding="utf-8")
    finally:
        generated.unlink(missing_ok=True)
    print(f"matrix spliced into {DOC.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
