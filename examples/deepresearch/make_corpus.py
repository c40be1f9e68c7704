"""Write corpus.jsonl: Python's documentation topics (``pydoc_data.topics``, the text of
``help('TOPIC')``), one document per topic, numbered in the topics' sorted order.

Python's documentation is Copyright (c) 2001 Python Software Foundation, distributed under the
PSF License Agreement (https://docs.python.org/3/license.html); see README.md. The committed
corpus was written from Python 3.11.7's topics; another Python version writes other texts.

Usage: python examples/deepresearch/make_corpus.py [OUT]
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path


def main() -> None:
    from pydoc_data.topics import topics

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("corpus.jsonl")
    lines = [
        json.dumps(
            {
                "id": str(number),
                "title": name,
                "text": topics[name].strip(),
                "url": f"pydoc:{platform.python_version()}/topics/{name}",
            },
            ensure_ascii=False,
        )
        for number, name in enumerate(sorted(topics), start=1)
    ]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} documents to {out}")


if __name__ == "__main__":
    main()
