"""A small bundled knowledge base on Triton optimisation, retrieved by relevance.

`phases/knowledge/*.md` holds short notes; each `## ` section is one snippet. `retrieve(query,
k)` ranks snippets by TF-IDF cosine similarity to the query (the case source, its
description and the plan), so the engineer's prompt carries the few notes that matter for
this model: a LayerNorm case gets the row-reduction notes, a Linear case the matmul ones.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

KNOWLEDGE_DIR = Path(__file__).resolve().parent / "knowledge"
_WORD = re.compile(r"[a-z][a-z0-9_]+")
# Words that occur in nearly every snippet or query and carry no topic.
_STOP = {"the", "and", "for", "with", "that", "this", "are", "not", "use", "one", "from", "into",
         "each", "its", "per", "than", "when", "all", "can", "but", "torch", "self", "return",
         "import", "def", "class", "none", "true", "false", "kernel", "triton"}


@dataclass(frozen=True)
class Snippet:
    """One `## ` section of a knowledge file."""

    source: str
    """File name and heading, e.g. 'reductions.md#LayerNorm numerics'."""
    title: str
    text: str


def _tokens(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    out = []
    for w in words:
        if w in _STOP or len(w) < 3:
            continue
        out.append(w)
        out.extend(p for p in w.split("_") if len(p) > 2 and p != w and p not in _STOP)
    return out


def load_snippets(directory: Path = KNOWLEDGE_DIR) -> list[Snippet]:
    """Every `## ` section of every `*.md` file, with the file's `# ` title as context."""
    snippets: list[Snippet] = []
    for file in sorted(directory.glob("*.md")):
        topic = ""
        sections: list[tuple[str, list[str]]] = []
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.startswith("## "):
                sections.append((line[3:].strip(), []))
            elif line.startswith("# "):
                topic = line[2:].strip()
            elif sections:
                sections[-1][1].append(line)
        for title, body in sections:
            text = "\n".join(body).strip()
            if text:
                snippets.append(Snippet(f"{file.name}#{title}",
                                        f"{topic}: {title}" if topic else title, text))
    return snippets


def retrieve(query: str, k: int = 4, *, snippets: list[Snippet] | None = None) -> list[Snippet]:
    """The `k` snippets most similar to `query` (TF-IDF, cosine), best first."""
    pool = snippets if snippets is not None else load_snippets()
    if not pool or k <= 0:
        return []
    docs = [Counter(_tokens(s.title + " " + s.title + " " + s.text)) for s in pool]
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(doc.keys())
    n = len(docs)

    def vector(counts: Counter[str]) -> dict[str, float]:
        return {t: (1 + math.log(c)) * math.log((n + 1) / (df[t] + 0.5))
                for t, c in counts.items() if t in df}

    q = vector(Counter(_tokens(query)))
    q_norm = math.sqrt(sum(v * v for v in q.values())) or 1.0
    scored = []
    for index, doc in enumerate(docs):
        d = vector(doc)
        d_norm = math.sqrt(sum(v * v for v in d.values())) or 1.0
        score = sum(w * d.get(t, 0.0) for t, w in q.items()) / (q_norm * d_norm)
        scored.append((score, -index))
    scored.sort(reverse=True)
    return [pool[-i] for score, i in scored[:k] if score > 0]
